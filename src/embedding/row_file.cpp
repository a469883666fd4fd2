#include "embedding/row_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "gphash/error.h"

namespace gphash::embedding {
namespace {

uint64_t header_checksum(const RowFileHeader& h) {
  // FNV-1a over the fixed fields (everything before `checksum`).
  const auto* p = reinterpret_cast<const unsigned char*>(&h);
  uint64_t x = 1469598103934665603ull;
  for (size_t i = 0; i < offsetof(RowFileHeader, checksum); ++i) x = (x ^ p[i]) * 1099511628211ull;
  return x;
}

uint64_t tier_checksum(const RowFileHeader& h) {
  const auto* p = reinterpret_cast<const unsigned char*>(&h);
  uint64_t x = 1469598103934665603ull;
  for (size_t i = offsetof(RowFileHeader, host_rows); i < offsetof(RowFileHeader, tier_checksum); ++i)
    x = (x ^ p[i]) * 1099511628211ull;
  return x;
}

[[noreturn]] void io_error(const std::string& what, const std::string& path) {
  throw Error(ErrorCode::kIo, what + " " + path + ": " + std::strerror(errno));
}

}  // namespace

std::string RowFile::path_for(const std::string& pool) {
  if (pool == "mem:") return {};
  if (pool.find('/') == std::string::npos) return "/dev/shm/" + pool + ".rows";
  return pool + ".rows";
}

void RowFile::remove(const std::string& pool) {
  const std::string p = path_for(pool);
  if (!p.empty()) ::unlink(p.c_str());
}

RowFile RowFile::create(const std::string& pool, uint32_t dtype, uint32_t dim, uint32_t stride, uint64_t capacity,
                        uint64_t host_rows, const std::string& tier_path, float default_value, bool replace) {
  if (capacity == 0 || capacity > (uint64_t{1} << 40) / stride)
    throw Error(ErrorCode::kInvalidArgument, "row capacity must be 1 .. 2^40 bytes of rows", "capacity");
  if (host_rows == 0 || host_rows > capacity)
    throw Error(ErrorCode::kInvalidArgument, "host_rows must be 1 .. capacity", "host_rows");
  if ((host_rows < capacity) != !tier_path.empty())
    throw Error(ErrorCode::kInvalidArgument,
                host_rows < capacity ? "host_rows below capacity needs a tier file: give tier_path"
                                     : "tier_path needs host_rows below capacity",
                "tier_path");
  if (tier_path.size() >= kTierPathBytes)
    throw Error(ErrorCode::kInvalidArgument, "tier_path is longer than 511 bytes", "tier_path");
  RowFile f;
  f.path_ = path_for(pool);
  f.bytes_ = kRowDataOffset + host_rows * stride;
  if (f.path_.empty()) {
    void* p = ::mmap(nullptr, f.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) io_error("cannot map anonymous rows for", pool);
    f.base_ = static_cast<std::byte*>(p);
  } else {
    const int fd = ::open(f.path_.c_str(), O_RDWR | O_CREAT | (replace ? O_TRUNC : O_EXCL), 0600);
    if (fd < 0) {
      if (errno == EEXIST)
        throw Error(ErrorCode::kPoolExists, "row file " + f.path_ + " exists: open the store, or create with replace", "pool");
      io_error("cannot create row file", f.path_);
    }
    // fallocate, not ftruncate: a full /dev/shm fails here with ENOSPC instead of a SIGBUS later.
    if (::posix_fallocate(fd, 0, static_cast<off_t>(f.bytes_)) != 0) {
      ::close(fd);
      ::unlink(f.path_.c_str());
      throw Error(ErrorCode::kNoSpace, "no space for " + std::to_string(f.bytes_) + " bytes of rows in " + f.path_, "capacity");
    }
    void* p = ::mmap(nullptr, f.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) io_error("cannot map row file", f.path_);
    f.base_ = static_cast<std::byte*>(p);
    f.regular_file_ = f.path_.rfind("/dev/shm/", 0) != 0;
  }
  RowFileHeader& h = f.header();
  std::memset(&h, 0, sizeof h);
  std::memcpy(h.magic, "GPHROWS1", 8);
  h.version = 2;
  h.dtype = dtype;
  h.dim = dim;
  h.stride = stride;
  h.capacity = capacity;
  h.default_value = default_value;
  h.checksum = header_checksum(h);
  h.host_rows = host_rows;
  std::memcpy(h.tier_path, tier_path.data(), tier_path.size());
  h.tier_checksum = tier_checksum(h);
  f.host_rows_ = host_rows;
  f.persist();
  return f;
}

RowFile RowFile::open(const std::string& pool) {
  RowFile f;
  f.path_ = path_for(pool);
  if (f.path_.empty()) throw Error(ErrorCode::kInvalidArgument, "an anonymous store (mem:) cannot be reopened", "pool");
  const int fd = ::open(f.path_.c_str(), O_RDWR);
  if (fd < 0) {
    if (errno == ENOENT) throw Error(ErrorCode::kNotFound, "no row file at " + f.path_ + " (is this an embedding store?)", "pool");
    io_error("cannot open row file", f.path_);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) { ::close(fd); io_error("cannot stat", f.path_); }
  RowFileHeader h{};
  // Read and validate the header before mapping, so a short or foreign file never faults.
  if (static_cast<size_t>(st.st_size) < kRowDataOffset || ::pread(fd, &h, sizeof h, 0) != sizeof h) {
    ::close(fd);
    throw Error(ErrorCode::kTruncated, "row file " + f.path_ + " is shorter than its header", "pool");
  }
  if (std::memcmp(h.magic, "GPHROWS1", 8) != 0) {
    ::close(fd);
    throw Error(ErrorCode::kNotAPool, f.path_ + " is not a gphash row file (bad magic)", "magic");
  }
  if (h.checksum != header_checksum(h)) {
    ::close(fd);
    throw Error(ErrorCode::kChecksumMismatch, "row file header of " + f.path_ + " fails its checksum", "checksum");
  }
  if (h.version != 1 && h.version != 2) {
    ::close(fd);
    throw Error(ErrorCode::kUnsupportedVersion, "row file " + f.path_ + " has version " + std::to_string(h.version) +
                                                    ", this build reads 1 and 2", "version");
  }
  if (h.version == 1) {
    h.host_rows = h.capacity;  // every row in this file
  } else if (h.tier_checksum != tier_checksum(h) || h.host_rows == 0 || h.host_rows > h.capacity ||
             std::memchr(h.tier_path, 0, kTierPathBytes) == nullptr) {
    ::close(fd);
    throw Error(ErrorCode::kChecksumMismatch, "row file header of " + f.path_ + ": its tier fields fail their checksum",
                "tier_checksum");
  }
  f.bytes_ = kRowDataOffset + h.host_rows * h.stride;
  if (static_cast<size_t>(st.st_size) < f.bytes_) {
    ::close(fd);
    throw Error(ErrorCode::kTruncated, "row file " + f.path_ + " is truncated: " + std::to_string(st.st_size) +
                                           " bytes, header says " + std::to_string(f.bytes_), "capacity");
  }
  void* p = ::mmap(nullptr, f.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) io_error("cannot map row file", f.path_);
  f.base_ = static_cast<std::byte*>(p);
  f.regular_file_ = f.path_.rfind("/dev/shm/", 0) != 0;
  if (f.header().next_row > h.capacity)
    throw Error(ErrorCode::kCorruptHeader, "row file " + f.path_ + ": next_row beyond capacity", "next_row");
  f.host_rows_ = h.host_rows;  // a version 1 file stays one (rewriting its header could tear it)
  return f;
}

RowFile::RowFile(RowFile&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)),
      bytes_(o.bytes_),
      host_rows_(o.host_rows_),
      regular_file_(o.regular_file_),
      path_(std::move(o.path_)) {}
RowFile& RowFile::operator=(RowFile&& o) noexcept {
  if (this != &o) {
    if (base_) ::munmap(base_, bytes_);
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = o.bytes_;
    host_rows_ = o.host_rows_;
    regular_file_ = o.regular_file_;
    path_ = std::move(o.path_);
  }
  return *this;
}
RowFile::~RowFile() {
  if (base_) ::munmap(base_, bytes_);
}

void RowFile::persist() {
  if (regular_file_ && base_ && ::msync(base_, bytes_, MS_SYNC) != 0) io_error("msync failed on", path_);
}

}  // namespace gphash::embedding

#include "embedding/file_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "gphash/error.h"

#ifdef GPHASH_HAVE_LIBURING
#include <liburing.h>
#endif

namespace gphash::embedding {
namespace {

[[noreturn]] void io_error(const std::string& what, const std::string& path) {
  throw Error(ErrorCode::kIo, what + " " + path + ": " + std::strerror(errno));
}

void check_rows(const uint64_t* rows, size_t n, uint64_t capacity) {
  for (size_t i = 0; i < n; ++i)
    if (rows[i] >= capacity)
      throw Error(ErrorCode::kInvalidArgument,
                  "row " + std::to_string(rows[i]) + " is beyond the tier's " + std::to_string(capacity) + " rows", "rows");
}

}  // namespace

FileTier FileTier::create(const std::string& path, uint32_t row_bytes, uint64_t capacity) {
  return start(path, row_bytes, capacity, true);
}

FileTier FileTier::open(const std::string& path, uint32_t row_bytes, uint64_t capacity) {
  return start(path, row_bytes, capacity, false);
}

FileTier FileTier::start(const std::string& path, uint32_t row_bytes, uint64_t capacity, bool create) {
  if (row_bytes == 0 || row_bytes > 65536) throw Error(ErrorCode::kInvalidArgument, "row_bytes must be 1..65536", "row_bytes");
  if (capacity == 0) throw Error(ErrorCode::kInvalidArgument, "capacity must be at least 1 row", "capacity");
  FileTier t;
  t.path_ = path;
  t.row_bytes_ = row_bytes;
  t.stride_ = (row_bytes + 511) / 512 * 512;
  t.capacity_ = capacity;
  const int flags = O_RDWR | (create ? O_CREAT | O_TRUNC : 0);
  int fd = ::open(path.c_str(), flags | O_DIRECT, 0600);
  t.direct_ = fd >= 0;
  if (fd < 0 && errno == EINVAL) fd = ::open(path.c_str(), flags, 0600);  // tmpfs: no O_DIRECT
  if (fd < 0 && !create && errno == ENOENT)
    throw Error(ErrorCode::kNotFound, "no tier file at " + path + " (where the store's rows live)", "tier_path");
  if (fd < 0) io_error(create ? "cannot create tier file" : "cannot open tier file", path);
  t.fd_ = fd;
  const uint64_t bytes = capacity * t.stride_;
  if (create) {
    if (::posix_fallocate(fd, 0, static_cast<off_t>(bytes)) != 0)
      throw Error(ErrorCode::kNoSpace, "no space for " + std::to_string(bytes) + " bytes in " + path, "capacity");
  } else {
    struct stat st {};
    if (::fstat(fd, &st) != 0) io_error("cannot stat", path);
    if (static_cast<uint64_t>(st.st_size) < bytes)
      throw Error(ErrorCode::kTruncated, "tier file " + path + " is truncated: " + std::to_string(st.st_size) +
                                             " bytes, the store needs " + std::to_string(bytes), "tier_path");
  }
  if (::posix_memalign(reinterpret_cast<void**>(&t.bounce_), 4096, size_t{t.queue_depth_} * t.stride_) != 0)
    throw Error(ErrorCode::kNoSpace, "cannot allocate the tier's read buffers", "capacity");
#ifdef GPHASH_HAVE_LIBURING
  auto* ring = new io_uring;
  if (io_uring_queue_init(t.queue_depth_, ring, 0) == 0) t.ring_ = ring;
  else delete ring;  // the kernel refuses io_uring (some sandboxes): pread it is
#endif
  return t;
}

FileTier::FileTier(FileTier&& o) noexcept { *this = std::move(o); }
FileTier& FileTier::operator=(FileTier&& o) noexcept {
  if (this != &o) {
    std::swap(fd_, o.fd_);
    std::swap(direct_, o.direct_);
    std::swap(row_bytes_, o.row_bytes_);
    std::swap(stride_, o.stride_);
    std::swap(queue_depth_, o.queue_depth_);
    std::swap(capacity_, o.capacity_);
    std::swap(path_, o.path_);
    std::swap(ring_, o.ring_);
    std::swap(bounce_, o.bounce_);
  }
  return *this;
}

FileTier::~FileTier() {
#ifdef GPHASH_HAVE_LIBURING
  if (ring_) {
    io_uring_queue_exit(static_cast<io_uring*>(ring_));
    delete static_cast<io_uring*>(ring_);
  }
#endif
  std::free(bounce_);
  if (fd_ >= 0) ::close(fd_);
}

void FileTier::write_rows(const uint64_t* rows, size_t n, const void* data) {
  check_rows(rows, n, capacity_);
  // Runs of consecutive rows (a bulk load) go out as one write each: per-row O_DIRECT writes
  // would take a device round trip per row.
  constexpr size_t kRun = 8192;
  std::byte* run = nullptr;
  size_t i = 0;
  while (i < n) {
    size_t len = 1;
    while (i + len < n && len < kRun && rows[i + len] == rows[i] + len) ++len;
    if (len < 16) break;  // scattered rows: one write each, below
    if (!run && ::posix_memalign(reinterpret_cast<void**>(&run), 4096, kRun * stride_) != 0)
      throw Error(ErrorCode::kNoSpace, "cannot allocate the tier's write buffer", "rows");
    std::memset(run, 0, len * stride_);
    for (size_t k = 0; k < len; ++k)
      std::memcpy(run + k * stride_, static_cast<const std::byte*>(data) + (i + k) * row_bytes_, row_bytes_);
    if (::pwrite(fd_, run, len * stride_, static_cast<off_t>(rows[i] * stride_)) != static_cast<ssize_t>(len * stride_)) {
      std::free(run);
      io_error("cannot write rows to", path_);
    }
    i += len;
  }
  std::free(run);
  for (; i < n; ++i) {
    std::memset(bounce_, 0, stride_);
    std::memcpy(bounce_, static_cast<const std::byte*>(data) + i * row_bytes_, row_bytes_);
    if (::pwrite(fd_, bounce_, stride_, static_cast<off_t>(rows[i] * stride_)) != static_cast<ssize_t>(stride_))
      io_error("cannot write a row to", path_);
  }
  if (::fsync(fd_) != 0) io_error("fsync failed on", path_);
}

void FileTier::read_pread(const uint64_t* rows, size_t n, void* out) {
  for (size_t i = 0; i < n; ++i) {
    if (::pread(fd_, bounce_, stride_, static_cast<off_t>(rows[i] * stride_)) != static_cast<ssize_t>(stride_))
      io_error("cannot read a row from", path_);
    std::memcpy(static_cast<std::byte*>(out) + i * row_bytes_, bounce_, row_bytes_);
  }
}

void FileTier::read_rows(const uint64_t* rows, size_t n, void* out, bool use_io_uring) {
  check_rows(rows, n, capacity_);
  if (!ring_ || !use_io_uring) return read_pread(rows, n, out);
#ifdef GPHASH_HAVE_LIBURING
  auto* ring = static_cast<io_uring*>(ring_);
  // Slots of the bounce buffer cycle through the reads: a read's slot is free again once its
  // completion has been copied out.
  std::vector<uint32_t> free_slots;
  for (uint32_t s = 0; s < queue_depth_; ++s) free_slots.push_back(s);
  std::vector<size_t> row_of_slot(queue_depth_);
  size_t next = 0, done = 0;
  while (done < n) {
    while (next < n && !free_slots.empty()) {
      io_uring_sqe* sqe = io_uring_get_sqe(ring);
      if (!sqe) break;
      const uint32_t slot = free_slots.back();
      free_slots.pop_back();
      row_of_slot[slot] = next;
      io_uring_prep_read(sqe, fd_, bounce_ + size_t{slot} * stride_, stride_, rows[next] * stride_);
      io_uring_sqe_set_data64(sqe, slot);
      ++next;
    }
    if (io_uring_submit_and_wait(ring, 1) < 0) io_error("io_uring submit failed on", path_);
    io_uring_cqe* cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(ring, head, cqe) {
      const uint32_t slot = static_cast<uint32_t>(io_uring_cqe_get_data64(cqe));
      if (cqe->res != static_cast<int>(stride_)) {
        errno = cqe->res < 0 ? -cqe->res : EIO;
        io_uring_cq_advance(ring, seen + 1);
        io_error("io_uring read failed on", path_);
      }
      std::memcpy(static_cast<std::byte*>(out) + row_of_slot[slot] * row_bytes_, bounce_ + size_t{slot} * stride_, row_bytes_);
      free_slots.push_back(slot);
      ++seen;
      ++done;
    }
    io_uring_cq_advance(ring, seen);
  }
#endif
}

}  // namespace gphash::embedding

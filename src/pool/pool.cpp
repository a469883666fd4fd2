#include "pool/pool.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "engines/common/crash_point.h"
#include "gphash/error.h"
#include "pool/cache_flush.h"

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif

namespace gphash::pool {

using format::PoolHeader;

const char* to_string(PoolKind kind) {
  switch (kind) {
    case PoolKind::kShm: return "shm";
    case PoolKind::kHugetlbfs: return "hugetlbfs";
    case PoolKind::kFile: return "file";
    case PoolKind::kMemory: return "memory";
  }
  return "?";
}

namespace {

constexpr uint64_t kDefaultReserve = uint64_t{1} << 40;   // 1 TiB of address space
constexpr uint64_t kFallbackReserve = uint64_t{64} << 30;  // where 1 TiB is refused
constexpr uint64_t kBaseAlign = uint64_t{1} << 21;         // huge-page aligned base

[[noreturn]] void io_error(const std::string& what, const std::string& path, int err) {
  throw Error(ErrorCode::kIo, fmt::format("{} {}: {}", what, path, std::strerror(err)));
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

std::string parent_dir(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

PoolKind kind_of_filesystem(const std::string& path, uint64_t* block_size) {
  struct statfs fs {};
  if (statfs(path.c_str(), &fs) != 0) io_error("cannot inspect the file system of", path, errno);
  *block_size = static_cast<uint64_t>(fs.f_bsize);
  if (static_cast<unsigned long>(fs.f_type) == TMPFS_MAGIC) return PoolKind::kShm;
  if (static_cast<unsigned long>(fs.f_type) == HUGETLBFS_MAGIC) return PoolKind::kHugetlbfs;
  return PoolKind::kFile;
}

void lock_file(int fd, bool exclusive, const std::string& path) {
  if (flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0) return;
  if (errno == EWOULDBLOCK)
    throw Error(ErrorCode::kPoolInUse, fmt::format("pool {} is open in another process; close it there first", path));
  io_error("cannot lock", path, errno);
}

}  // namespace

Location resolve_location(const std::string& spec) {
  if (spec == "mem:" || spec == "mem") return {PoolKind::kMemory, ""};
  if (spec.empty()) throw Error(ErrorCode::kInvalidArgument, "empty pool path");
  std::string path = spec.find('/') == std::string::npos ? "/dev/shm/" + spec : spec;
  uint64_t block = 0;
  return {kind_of_filesystem(parent_dir(path), &block), path};
}

std::unique_ptr<Pool> Pool::create(const std::string& spec, const CreateOptions& options) {
  Location loc = resolve_location(spec);
  std::unique_ptr<Pool> pool(new Pool);
  pool->kind_ = loc.kind;
  pool->path_ = loc.kind == PoolKind::kMemory ? "mem:" : loc.path;
  pool->max_size_ = options.max_size;
  pool->persist_mode_ = loc.kind == PoolKind::kFile ? PersistMode::kMsync : PersistMode::kOrdered;
  uint64_t block = 4096;
  if (loc.kind == PoolKind::kMemory) {
    pool->fd_ = memfd_create("gphash-pool", MFD_CLOEXEC);
    if (pool->fd_ < 0) io_error("cannot create anonymous memory for", "a pool", errno);
  } else {
    kind_of_filesystem(parent_dir(loc.path), &block);
    struct stat st {};
    if (!options.replace && stat(loc.path.c_str(), &st) == 0)
      throw Error(ErrorCode::kPoolExists,
                  fmt::format("pool {} exists; remove it, pick another path, or replace it", loc.path));
    std::random_device rd;
    pool->temp_path_ = fmt::format("{}.creating-{}-{:08x}", loc.path, getpid(), rd());
    pool->fd_ = ::open(pool->temp_path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (pool->fd_ < 0) io_error("cannot create pool file", pool->temp_path_, errno);
  }
  lock_file(pool->fd_, true, pool->path_);
  uint32_t align_log2 = options.extent_align_log2;
  if (align_log2 == 0) align_log2 = loc.kind == PoolKind::kHugetlbfs ? static_cast<uint32_t>(__builtin_ctzll(block)) : 12;
  pool->header_.extent_align_log2 = align_log2;
  uint64_t reserve = options.max_size ? align_up(options.max_size, kBaseAlign) : kDefaultReserve;
  pool->map_file(reserve);
  pool->grow_file(align_up(format::kReservedPrefixBytes, uint64_t{1} << align_log2));
  pool->header_.pool_used = format::kReservedPrefixBytes;
  pool->header_.pool_size = pool->file_size_;
  return pool;
}

std::unique_ptr<Pool> Pool::open(const std::string& spec, const OpenOptions& options) {
  Location loc = resolve_location(spec);
  if (loc.kind == PoolKind::kMemory)
    throw Error(ErrorCode::kInvalidArgument, "anonymous memory pools exist only while their creator runs");
  std::unique_ptr<Pool> pool(new Pool);
  pool->kind_ = loc.kind;
  pool->path_ = loc.path;
  pool->read_only_ = options.read_only;
  pool->max_size_ = options.max_size;
  pool->persist_mode_ = loc.kind == PoolKind::kFile ? PersistMode::kMsync : PersistMode::kOrdered;
  if (options.force_flush) pool->persist_mode_ = PersistMode::kFlush;
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is then refused as not a file).
  pool->fd_ = ::open(loc.path.c_str(), (options.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NONBLOCK);
  if (pool->fd_ < 0) {
    if (errno == ENOENT) throw Error(ErrorCode::kNotFound, fmt::format("no pool at {}", loc.path));
    io_error("cannot open pool", loc.path, errno);
  }
  lock_file(pool->fd_, !options.read_only, loc.path);
  struct stat st {};
  if (fstat(pool->fd_, &st) != 0) io_error("cannot stat pool", loc.path, errno);
  if (!S_ISREG(st.st_mode)) throw Error(ErrorCode::kNotAPool, fmt::format("not a gphash pool: {} is not a file", loc.path));
  const uint64_t size = static_cast<uint64_t>(st.st_size);

  // Everything up to the mapping is read with pread, so a short or hostile file cannot SIGBUS us.
  // Magic in either header copy: a flipped byte in the first copy alone falls back to the second.
  auto magic_at = [&](uint64_t offset) {
    unsigned char magic[8] = {};
    ssize_t got = pread(pool->fd_, magic, sizeof magic, static_cast<off_t>(offset));
    if (got < 0) io_error("cannot read pool", loc.path, errno);
    return got == static_cast<ssize_t>(sizeof magic) && std::memcmp(magic, format::kMagic, sizeof magic) == 0;
  };
  if (!magic_at(format::kHeaderCopyOffset[0]) && !magic_at(format::kHeaderCopyOffset[1]))
    throw Error(ErrorCode::kNotAPool,
                fmt::format("not a gphash pool: {} ({})", loc.path, size == 0 ? "empty file" : "wrong magic bytes"),
                "magic");
  if (size < format::kReservedPrefixBytes)
    throw Error(ErrorCode::kTruncated,
                fmt::format("pool is truncated: {} has {} bytes, a pool has at least {}", loc.path, size,
                            format::kReservedPrefixBytes),
                "pool_size");

  PoolHeader copies[2];
  bool valid[2] = {false, false};
  std::unique_ptr<Error> errors[2];
  for (int c = 0; c < 2; ++c) {
    if (pread(pool->fd_, &copies[c], sizeof(PoolHeader), static_cast<off_t>(format::kHeaderCopyOffset[c])) !=
        static_cast<ssize_t>(sizeof(PoolHeader)))
      io_error("cannot read the header of", loc.path, errno);
    try {
      format::validate_header(copies[c], size);
      valid[c] = true;
    } catch (const Error& e) {
      errors[c] = std::make_unique<Error>(e);
    }
  }
  if (!valid[0] && !valid[1]) {
    // Report the copy that got further: a copy with wrong magic says less than one with a bad field.
    const Error& e = errors[0]->code() == ErrorCode::kNotAPool ? *errors[1] : *errors[0];
    throw Error(e.code(), fmt::format("{} (both header copies of {} are unusable)", e.what(), loc.path), e.field());
  }
  int pick = valid[0] && (!valid[1] || copies[0].generation >= copies[1].generation) ? 0 : 1;
  pool->header_ = copies[pick];
  pool->current_copy_ = pick;
  pool->other_copy_invalid_ = !valid[1 - pick];

  uint64_t reserve = std::max(options.max_size ? align_up(options.max_size, kBaseAlign) : kDefaultReserve,
                              align_up(size, kBaseAlign));
  pool->file_size_ = size;
  pool->map_file(reserve);
  return pool;
}

Pool::~Pool() {
  if (base_) munmap(base_, reserved_);
  if (fd_ >= 0) close(fd_);
  if (!temp_path_.empty()) unlink(temp_path_.c_str());
}

void Pool::map_file(uint64_t reserve_bytes) {
  void* area = MAP_FAILED;
  for (uint64_t want : {reserve_bytes, std::min(reserve_bytes, kFallbackReserve)}) {
    area = mmap(nullptr, want + kBaseAlign, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (area != MAP_FAILED) {
      reserve_bytes = want;
      break;
    }
  }
  if (area == MAP_FAILED) io_error("cannot reserve address space for", path_, errno);
  // Trim the reservation to an aligned base so huge-page mappings line up.
  auto raw = reinterpret_cast<uintptr_t>(area);
  uintptr_t aligned = (raw + kBaseAlign - 1) & ~(kBaseAlign - 1);
  if (aligned > raw) munmap(area, aligned - raw);
  munmap(reinterpret_cast<void*>(aligned + reserve_bytes), raw + kBaseAlign - aligned);
  base_ = reinterpret_cast<std::byte*>(aligned);
  reserved_ = reserve_bytes;
  if (file_size_ > 0) {
    if (file_size_ > reserved_)
      throw Error(ErrorCode::kNoSpace, fmt::format("pool {} ({} bytes) exceeds its address reservation", path_, file_size_));
    int prot = read_only_ ? PROT_READ : PROT_READ | PROT_WRITE;
    if (mmap(base_, file_size_, prot, MAP_SHARED | MAP_FIXED, fd_, 0) == MAP_FAILED)
      io_error("cannot map pool", path_, errno);
  }
}

void Pool::grow_file(uint64_t new_size) {
  if (new_size <= file_size_) return;
  if (read_only_) throw Error(ErrorCode::kReadOnly, fmt::format("pool {} is open read-only", path_));
  if ((max_size_ && new_size > max_size_) || new_size > reserved_)
    throw Error(ErrorCode::kNoSpace,
                fmt::format("pool {} cannot grow to {} bytes: its size limit is {}", path_, new_size,
                            max_size_ ? max_size_ : reserved_));
  // fallocate (not ftruncate) so a full file system is an error now, not a SIGBUS later.
  if (fallocate(fd_, 0, static_cast<off_t>(file_size_), static_cast<off_t>(new_size - file_size_)) != 0) {
    int err = errno;
    if (err == ENOSPC)
      throw Error(ErrorCode::kNoSpace, fmt::format("no space to grow pool {} to {} bytes: its file system is full", path_,
                                                   new_size));
    if (err != EOPNOTSUPP || ftruncate(fd_, static_cast<off_t>(new_size)) != 0) io_error("cannot grow pool", path_, err);
  }
  if (mmap(base_ + file_size_, new_size - file_size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd_,
           static_cast<off_t>(file_size_)) == MAP_FAILED)
    io_error("cannot map the grown part of pool", path_, errno);
  file_size_ = new_size;
}

void Pool::publish() {
  if (temp_path_.empty()) return;
  if (rename(temp_path_.c_str(), path_.c_str()) != 0) io_error("cannot publish pool", path_, errno);
  temp_path_.clear();
  if (kind_ == PoolKind::kFile) {
    int dir = ::open(parent_dir(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      fsync(dir);
      close(dir);
    }
  }
}

void Pool::write_header(PoolHeader h) {
  if (read_only_) throw Error(ErrorCode::kReadOnly, fmt::format("pool {} is open read-only", path_));
  h.generation = header_.generation + 1;
  format::seal(h);
  int target = 1 - current_copy_;
  auto* dst = at<PoolHeader>(format::kHeaderCopyOffset[target]);
  std::memcpy(static_cast<void*>(dst), &h, sizeof h);
  GPHASH_CRASH_POINT("header.after_copy_write");
  persist(dst, sizeof h);
  GPHASH_CRASH_POINT("header.after_persist");
  if (persist_mode_ == PersistMode::kMsync && msync(dst, sizeof h, MS_SYNC) != 0) io_error("cannot sync the header of", path_, errno);
  header_ = h;
  current_copy_ = target;
  other_copy_invalid_ = false;
}

void Pool::write_initial_header(PoolHeader h) {
  h.generation = 1;
  format::seal(h);
  for (uint64_t off : format::kHeaderCopyOffset) std::memcpy(static_cast<void*>(at<PoolHeader>(off)), &h, sizeof h);
  persist(base_, 2 * sizeof h);
  header_ = h;
  current_copy_ = 0;
  sync();
}

uint64_t Pool::allocate_extent(PoolHeader& h, uint64_t bytes) {
  const uint64_t align = uint64_t{1} << h.extent_align_log2;
  const uint64_t offset = align_up(h.pool_used, align);
  const uint64_t end = align_up(offset + bytes, align);
  // A torn header write may have left an older attempt's bytes past pool_used: clear them.
  if (offset < file_size_) {
    uint64_t stale_end = std::min(end, file_size_);
    if (fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                  static_cast<off_t>(stale_end - offset)) != 0)
      std::memset(base_ + offset, 0, stale_end - offset);
  }
  grow_file(end);
  h.pool_used = offset + bytes;
  h.pool_size = std::max(h.pool_size, end);
  return offset;
}

void Pool::release_extent(uint64_t offset, uint64_t bytes) {
  // Best effort: the memory returns to the file system; reads would see zeros.
  (void)fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset), static_cast<off_t>(bytes));
}

void Pool::persist(const void* p, size_t n) const {
  switch (persist_mode_) {
    case PersistMode::kOrdered:
    case PersistMode::kMsync:
      std::atomic_thread_fence(std::memory_order_release);
      break;
    case PersistMode::kFlush:
      flush_lines(p, n);
      store_fence();
      break;
  }
}

void Pool::sync() const {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (persist_mode_ == PersistMode::kFlush) store_fence();
  if (persist_mode_ == PersistMode::kMsync && file_size_ && msync(base_, file_size_, MS_SYNC) != 0)
    io_error("cannot sync pool", path_, errno);
}

}  // namespace gphash::pool

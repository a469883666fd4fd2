#include "pool/pool.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <dirent.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "engines/common/crash_point.h"
#include "format/header_v1.h"
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

// Pools this process has open, by file identity. flock cannot tell a lock of this process from
// one of another process, so without this a second open in one process would blame "another
// process".
struct OpenPools {
  std::mutex mutex;
  std::map<std::pair<dev_t, ino_t>, std::pair<int, int>> opens;  // (readers, writers)
};
OpenPools& open_pools() {
  static OpenPools pools;
  return pools;
}

std::string basename_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

// This process's record that it holds a pool's lock; removed with the Pool.
class OpenRegistration {
 public:
  OpenRegistration(std::pair<dev_t, ino_t> id, bool writer) : id_(id), writer_(writer) {}
  ~OpenRegistration() {
    std::lock_guard lock(open_pools().mutex);
    auto it = open_pools().opens.find(id_);
    if (it == open_pools().opens.end()) return;
    (writer_ ? it->second.second : it->second.first) -= 1;
    if (it->second.first == 0 && it->second.second == 0) open_pools().opens.erase(it);
  }

 private:
  std::pair<dev_t, ino_t> id_;
  bool writer_;
};

namespace {

// Takes the pool's lock (exclusive for writers, shared for readers) without waiting and records
// the open in this process. A pool held elsewhere is kPoolInUse, saying whether "elsewhere" is
// this process.
std::unique_ptr<OpenRegistration> lock_file(int fd, bool exclusive, const std::string& path) {
  struct stat st {};
  if (fstat(fd, &st) != 0) io_error("cannot stat", path, errno);
  const std::pair<dev_t, ino_t> id{st.st_dev, st.st_ino};
  std::lock_guard guard(open_pools().mutex);
  auto it = open_pools().opens.find(id);
  if (it != open_pools().opens.end() && (exclusive || it->second.second > 0))
    throw Error(ErrorCode::kPoolInUse,
                fmt::format("pool {} is already open in this process{}; close that Table first", path,
                            it->second.second > 0 ? " for writing" : ""));
  if (flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      throw Error(ErrorCode::kPoolInUse, fmt::format("pool {} is open in another process; close it there first", path));
    io_error("cannot lock", path, errno);
  }
  auto& counts = open_pools().opens[id];
  (exclusive ? counts.second : counts.first) += 1;
  return std::make_unique<OpenRegistration>(id, exclusive);
}

bool same_file(int fd, const std::string& path) {
  struct stat a {}, b {};
  return fstat(fd, &a) == 0 && stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// Removes NAME.creating-PID-XXXXXXXX files left by a create that was killed: ours by their name,
// their creator gone (no such process), and unlocked.
void remove_stale_creations(const std::string& path) {
  const std::string dir = parent_dir(path), prefix = basename_of(path) + ".creating-";
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (pid <= 0 || *end != '-' || pid == getpid()) continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // its creator may still run
    const int fd = openat(dirfd(d), name.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) unlinkat(dirfd(d), name.c_str(), 0);
    close(fd);
  }
  closedir(d);
}

struct ChosenHeader {
  PoolHeader header;
  int copy = 0;
  bool other_invalid = false;
};

// Reads both header copies with pread (nothing is mapped yet, so a short or hostile file cannot
// SIGBUS us), validates each and picks the valid one with the newer generation.
ChosenHeader choose_header(int fd, const std::string& path, uint64_t size) {
  // Magic in either header copy: a flipped byte in the first copy alone falls back to the second.
  auto magic_at = [&](uint64_t offset) {
    unsigned char magic[8] = {};
    ssize_t got = pread(fd, magic, sizeof magic, static_cast<off_t>(offset));
    if (got < 0) io_error("cannot read pool", path, errno);
    return got == static_cast<ssize_t>(sizeof magic) && std::memcmp(magic, format::kMagic, sizeof magic) == 0;
  };
  if (!magic_at(format::kHeaderCopyOffset[0]) && !magic_at(format::kHeaderCopyOffset[1]))
    throw Error(ErrorCode::kNotAPool,
                fmt::format("not a gphash pool: {} ({})", path, size == 0 ? "empty file" : "wrong magic bytes"), "magic");
  if (size < format::kReservedPrefixBytes)
    throw Error(ErrorCode::kTruncated,
                fmt::format("pool is truncated: {} has {} bytes, a pool has at least {}", path, size,
                            format::kReservedPrefixBytes),
                "pool_size");
  PoolHeader copies[2];
  bool valid[2] = {false, false};
  std::unique_ptr<Error> errors[2];
  for (int c = 0; c < 2; ++c) {
    if (pread(fd, &copies[c], sizeof(PoolHeader), static_cast<off_t>(format::kHeaderCopyOffset[c])) !=
        static_cast<ssize_t>(sizeof(PoolHeader)))
      io_error("cannot read the header of", path, errno);
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
    throw Error(e.code(), fmt::format("{} (both header copies of {} are unusable)", e.what(), path), e.field());
  }
  const int pick = valid[0] && (!valid[1] || copies[0].generation >= copies[1].generation) ? 0 : 1;
  return {copies[pick], pick, !valid[1 - pick]};
}

int open_regular(const std::string& path, int flags, struct stat* st) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is then refused as not a file).
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) throw Error(ErrorCode::kNotFound, fmt::format("no pool at {}", path));
    io_error("cannot open pool", path, errno);
  }
  if (fstat(fd, st) != 0) {
    const int err = errno;
    close(fd);
    io_error("cannot stat pool", path, err);
  }
  if (!S_ISREG(st->st_mode)) {
    close(fd);
    throw Error(ErrorCode::kNotAPool, fmt::format("not a gphash pool: {} is not a file", path));
  }
  return fd;
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
    remove_stale_creations(loc.path);
    struct stat st {};
    if (stat(loc.path.c_str(), &st) == 0) {
      if (!options.replace)
        throw Error(ErrorCode::kPoolExists,
                    fmt::format("pool {} exists; remove it, pick another path, or replace it", loc.path));
      // Replacing: hold the old pool's lock until the new one takes its name, so a pool that is in
      // use is refused instead of losing its writer's data to a file without a name.
      struct stat old_st {};
      pool->replaced_fd_ = open_regular(loc.path, O_RDONLY, &old_st);
      pool->replaced_registration_ = lock_file(pool->replaced_fd_, true, loc.path);
    }
    std::random_device rd;
    pool->temp_path_ = fmt::format("{}.creating-{}-{:08x}", loc.path, getpid(), rd());
    pool->fd_ = ::open(pool->temp_path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (pool->fd_ < 0) io_error("cannot create pool file", pool->temp_path_, errno);
    if (fchmod(pool->fd_, options.file_mode & 07777) != 0) io_error("cannot set the permissions of", pool->temp_path_, errno);
  }
  pool->registration_ = lock_file(pool->fd_, true, pool->path_);
  uint32_t align_log2 = options.extent_align_log2;
  if (align_log2 == 0) align_log2 = loc.kind == PoolKind::kHugetlbfs ? static_cast<uint32_t>(__builtin_ctzll(block)) : 12;
  pool->header_.extent_align_log2 = align_log2;
  uint64_t reserve = options.max_size ? align_up(options.max_size, kBaseAlign) : kDefaultReserve;
  if (options.reserve_bytes > reserve)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("reserve_pool_bytes {} is over the largest size pool {} can have ({} bytes)",
                            options.reserve_bytes, pool->path_, reserve),
                "reserve_pool_bytes");
  if (options.reserve_bytes) pool->reserve_file_space(options.reserve_bytes);
  pool->kept_end_ = options.reserve_bytes;
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
  pool->copy_on_write_ = options.copy_on_write;
  const bool writer = !options.read_only && !options.copy_on_write;
  struct stat st {};
  // The lock is taken on an open file; if the path was replaced meanwhile, that file has no name
  // any more and writing to it would lose every write: open the path again.
  for (int attempt = 0;; ++attempt) {
    pool->fd_ = open_regular(loc.path, writer ? O_RDWR : O_RDONLY, &st);
    pool->registration_ = lock_file(pool->fd_, writer, loc.path);
    if (same_file(pool->fd_, loc.path)) break;
    pool->registration_.reset();
    close(pool->fd_);
    pool->fd_ = -1;
    if (attempt == 8) throw Error(ErrorCode::kPoolInUse, fmt::format("pool {} keeps being replaced; try again", loc.path));
  }
  if (fstat(pool->fd_, &st) != 0) io_error("cannot stat pool", loc.path, errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  ChosenHeader chosen = choose_header(pool->fd_, loc.path, size);
  pool->set_header(chosen.header);
  pool->current_copy_ = chosen.copy;
  pool->other_copy_invalid_ = chosen.other_invalid;
  if (options.copy_on_write) pool->persist_mode_ = PersistMode::kOrdered;  // nothing reaches the file

  uint64_t reserve = std::max(options.max_size ? align_up(options.max_size, kBaseAlign) : kDefaultReserve,
                              align_up(size, kBaseAlign));
  pool->file_size_ = size;
  pool->kept_end_ = static_cast<uint64_t>(st.st_blocks) * 512;  // an upper bound of what lies past the size
  pool->map_file(reserve);
  return pool;
}

Pool::~Pool() {
  wait_ahead();
  // Space reserved ahead that no growth used goes back to the file system.
  const uint64_t unused_from = std::max(file_size_, kept_end_);
  if (fd_ >= 0 && ahead_end_ > unused_from)
    (void)fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(unused_from),
                    static_cast<off_t>(ahead_end_ - unused_from));
  if (base_) munmap(base_, reserved_);
  if (!temp_path_.empty()) unlink(temp_path_.c_str());
  if (fd_ >= 0) close(fd_);
  if (replaced_fd_ >= 0) close(replaced_fd_);
}

namespace {

// 2 MiB pages for a shared mapping of a tmpfs or memfd pool, where the system leaves the choice to
// the mapping (a tmpfs mounted huge=advise; memfd pools with shmem_enabled "advise"; huge=always
// gives them anyway). They make a host-mapped GPU table's growth about twice as fast: on the H200
// machine a LOAD of 16.8 M items into a small table (8 resizes, 7 heap growths) ran at 30.2-34.6
// M/s on a tmpfs mounted huge=always against 14.7-17.2 on its /dev/shm (huge=never): fewer pages
// to fault in, register with CUDA, unpin and release (bench/results/2026-12-01-rehash-own-bucket).
// Best effort: without transparent huge pages the call fails, harmlessly.
void advise_huge_pages(std::byte* p, uint64_t bytes) { (void)madvise(p, bytes, MADV_HUGEPAGE); }

}  // namespace

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
  dirty_pages_ = std::make_unique<DirtyPages>(reserved_);
  if (file_size_ > 0) {
    if (file_size_ > reserved_)
      throw Error(ErrorCode::kNoSpace, fmt::format("pool {} ({} bytes) exceeds its address reservation", path_, file_size_));
    const int prot = read_only_ ? PROT_READ : PROT_READ | PROT_WRITE;
    const int sharing = copy_on_write_ ? MAP_PRIVATE : MAP_SHARED;
    if (mmap(base_, file_size_, prot, sharing | MAP_FIXED, fd_, 0) == MAP_FAILED)
      io_error("cannot map pool", path_, errno);
    if (sharing == MAP_SHARED && (kind_ == PoolKind::kShm || kind_ == PoolKind::kMemory)) advise_huge_pages(base_, file_size_);
  }
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace {

// Faults in (allocating) the pages of a shared mapping for writing, in slices of at least 8 MiB
// on up to 4 threads. Returns 0 or the first error (EFAULT: the file system is full). With 64 MiB
// slices the CPU engine's resizes populated each new level on 1 to 4 threads; on 8 MiB slices the
// eight of a 16-thread load of 16 M keys took 0.164-0.173 -> 0.131-0.142 s (16-core Xeon). More
// than 4 threads contend in the kernel (page faults into one file): 1 GiB of tmpfs on that
// machine took 0.653 / 0.189 / 0.214 / 0.216 s on 1 / 4 / 8 / 16 threads, and pages the file
// already had (CreateOptions::reserve_bytes) 0.251 / 0.085 / 0.200 / 0.232 s
// (bench/results/2026-11-29-pool-reservation).
int populate_pages(std::byte* p, uint64_t bytes) {
  constexpr uint64_t kSlice = uint64_t{8} << 20, kHugePage = uint64_t{2} << 20;
  const unsigned threads = static_cast<unsigned>(
      std::clamp<uint64_t>(bytes / kSlice, 1, std::min(4u, std::max(1u, std::thread::hardware_concurrency()))));
  const uint64_t step = (bytes / threads + kHugePage - 1) / kHugePage * kHugePage;  // no 2 MiB page split between threads
  std::atomic<int> error{0};
  auto slice = [&](unsigned i) {
    const uint64_t begin = i * step;
    if (begin < bytes && madvise(p + begin, std::min(step, bytes - begin), MADV_POPULATE_WRITE) != 0) {
      int expected = 0;
      error.compare_exchange_strong(expected, errno);
    }
  };
  std::vector<std::thread> helpers;
  for (unsigned i = 1; i < threads; ++i) helpers.emplace_back(slice, i);
  slice(0);
  for (std::thread& t : helpers) t.join();
  return error.load();
}

}  // namespace

// CreateOptions::reserve_bytes: the file's blocks for its first `bytes`, allocated now and kept
// beyond its size (KEEP_SIZE), so grow_file() maps memory the file already has.
void Pool::reserve_file_space(uint64_t bytes) {
  if (fallocate(fd_, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(bytes)) == 0) return;
  const int err = errno;
  if (err == ENOSPC)
    throw Error(ErrorCode::kNoSpace,
                fmt::format("cannot reserve {} bytes for pool {}: its file system is full", bytes, path_), "reserve_pool_bytes");
  if (err == EOPNOTSUPP)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("the file system of pool {} cannot reserve space (fallocate): create it without a reservation",
                            path_),
                "reserve_pool_bytes");
  io_error("cannot reserve space for pool", path_, err);
}

// Whether the file has every page of [0, end) past its current size, from a reservation. Its blocks
// lie in [0, max(reservation, size)): only reserve_file_space() allocates past the size, and only
// released extents, below the size, are punched out. So blocks for `end` bytes or more, with `end`
// past the size, mean the reservation reaches `end` and the file has every page from its size to
// `end`. (SEEK_HOLE and mincore cannot tell: on tmpfs a reserved page nobody wrote is a hole to
// both.) A copy of the file lacks the reservation, and then its blocks say so.
bool Pool::reserved_through(uint64_t end) const {
  struct stat st {};
  return fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_blocks) * 512 >= end;
}

void Pool::reserve_ahead(uint64_t bytes) {
  if ((kind_ != PoolKind::kShm && kind_ != PoolKind::kMemory) || read_only_ || copy_on_write_) return;
  wait_ahead();
  const uint64_t from = std::max(file_size_, ahead_end_);
  const uint64_t end = std::min(from + bytes, max_size_ ? std::min(max_size_, reserved_) : reserved_);
  if (end <= from) return;
  ahead_end_ = end;
  ahead_ = std::thread([fd = fd_, from, end] {
    (void)fallocate(fd, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(from), static_cast<off_t>(end - from));
  });
}

void Pool::wait_ahead() {
  if (ahead_.joinable()) ahead_.join();
}

void Pool::grow_file(uint64_t new_size, Populate populate) {
  wait_ahead();
  if (new_size <= file_size_) return;
  if (read_only_ || copy_on_write_)
    throw Error(ErrorCode::kReadOnly, fmt::format("pool {} is open read-only (or as a private view) and cannot grow", path_));
  if ((max_size_ && new_size > max_size_) || new_size > reserved_)
    throw Error(ErrorCode::kNoSpace,
                fmt::format("pool {} cannot grow to {} bytes: its size limit is {}", path_, new_size,
                            max_size_ ? max_size_ : reserved_));
  const uint64_t old_size = file_size_, added = new_size - old_size;
  std::byte* grown = base_ + old_size;
  // tmpfs and memfd pools: size the file, map it, and fault the new pages in from several threads
  // (MADV_POPULATE_WRITE). A single fallocate zeroes them on one thread, and cudaHostRegister then
  // faults them in on one thread again: growing by 2 GiB took 1.0 s on the H100 machine, 0.54 s
  // this way. A full file system is still an error now, not a SIGBUS later: populating reports it.
  if ((kind_ == PoolKind::kShm || kind_ == PoolKind::kMemory) && ftruncate(fd_, static_cast<off_t>(new_size)) == 0) {
    if (mmap(grown, added, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd_, static_cast<off_t>(old_size)) == MAP_FAILED)
      io_error("cannot map the grown part of pool", path_, errno);
    advise_huge_pages(grown, added);
    const bool skip = populate == Populate::kByCaller || (populate == Populate::kUnlessReserved && reserved_through(new_size));
    const int err = skip ? 0 : populate_pages(grown, added);
    if (err == 0) {
      file_size_ = new_size;
      return;
    }
    // Undo: the reservation takes the range back, and the file its old size.
    mmap(grown, added, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (ftruncate(fd_, static_cast<off_t>(old_size)) != 0) io_error("cannot shrink pool back", path_, errno);
    if (err == EFAULT || err == ENOMEM)
      throw Error(ErrorCode::kNoSpace, fmt::format("no space to grow pool {} to {} bytes: its file system is full", path_,
                                                   new_size));
    // EINVAL: a kernel before 5.14, without MADV_POPULATE_WRITE: fallocate below.
  }
  // fallocate (not ftruncate) so a full file system is an error now, not a SIGBUS later.
  if (fallocate(fd_, 0, static_cast<off_t>(old_size), static_cast<off_t>(added)) != 0) {
    int err = errno;
    if (err == ENOSPC)
      throw Error(ErrorCode::kNoSpace, fmt::format("no space to grow pool {} to {} bytes: its file system is full", path_,
                                                   new_size));
    if (err != EOPNOTSUPP || ftruncate(fd_, static_cast<off_t>(new_size)) != 0) io_error("cannot grow pool", path_, err);
  }
  if (mmap(grown, added, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd_, static_cast<off_t>(old_size)) == MAP_FAILED)
    io_error("cannot map the grown part of pool", path_, errno);
  file_size_ = new_size;
}

void Pool::publish() {
  if (temp_path_.empty()) return;
  if (replaced_fd_ >= 0) {
    // We hold the old pool's lock, so no one else can be replacing or writing it.
    if (rename(temp_path_.c_str(), path_.c_str()) != 0) io_error("cannot publish pool", path_, errno);
    replaced_registration_.reset();
    close(replaced_fd_);
    replaced_fd_ = -1;
  } else {
    // link() fails if a pool appeared at the path since create() looked: never replace it unasked.
    if (link(temp_path_.c_str(), path_.c_str()) != 0) {
      if (errno == EEXIST)
        throw Error(ErrorCode::kPoolExists,
                    fmt::format("pool {} was created by someone else meanwhile; remove it, pick another path, or "
                                "replace it", path_));
      if (renameat2(AT_FDCWD, temp_path_.c_str(), AT_FDCWD, path_.c_str(), RENAME_NOREPLACE) != 0)
        io_error("cannot publish pool", path_, errno);
    }
    unlink(temp_path_.c_str());
  }
  temp_path_.clear();
  if (kind_ == PoolKind::kFile) {
    int dir = ::open(parent_dir(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      fsync(dir);
      close(dir);
    }
  }
}

HeaderSnapshot read_header(const std::string& spec) {
  Location loc = resolve_location(spec);
  if (loc.kind == PoolKind::kMemory)
    throw Error(ErrorCode::kInvalidArgument, "anonymous memory pools exist only while their creator runs");
  struct stat st {};
  const int fd = open_regular(loc.path, O_RDONLY, &st);
  HeaderSnapshot r;
  r.kind = loc.kind;
  r.path = loc.path;
  r.file_size = static_cast<uint64_t>(st.st_size);
  try {
    r.header = choose_header(fd, loc.path, r.file_size).header;
    if (pread(fd, &r.write_counter, sizeof r.write_counter, format::kWriteCounterOffset) != sizeof r.write_counter)
      r.write_counter = 0;
  } catch (...) {
    close(fd);
    throw;
  }
  // A shared lock we cannot get means a writer holds the pool.
  if (flock(fd, LOCK_SH | LOCK_NB) != 0)
    r.in_use = true;
  else
    flock(fd, LOCK_UN);
  close(fd);
  return r;
}

bool convert_pool(const std::string& spec) {
  Location loc = resolve_location(spec);
  if (loc.kind == PoolKind::kMemory) throw Error(ErrorCode::kInvalidArgument, "anonymous memory pools have no file to convert");
  struct stat st {};
  const int fd = open_regular(loc.path, O_RDWR, &st);
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  auto registration = lock_file(fd, true, loc.path);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  format::v1::PoolHeader old[2];
  PoolHeader current[2];
  bool is_old[2], is_current[2];
  for (int c = 0; c < 2; ++c) {
    if (pread(fd, &old[c], sizeof old[c], static_cast<off_t>(format::kHeaderCopyOffset[c])) != sizeof old[c])
      io_error("cannot read the header of", loc.path, errno);
    std::memcpy(static_cast<void*>(&current[c]), &old[c], sizeof current[c]);
    is_old[c] = format::v1::is_intact(old[c]);
    is_current[c] = false;
    try {
      format::validate_header(current[c], size);
      is_current[c] = true;
    } catch (const Error&) {
    }
  }
  if (is_current[0] || is_current[1]) {
    const int newer = is_current[0] && (!is_current[1] || current[0].generation >= current[1].generation) ? 0 : 1;
    if (!is_old[1 - newer]) return false;  // already converted
  } else if (!is_old[0] && !is_old[1]) {
    choose_header(fd, loc.path, size);  // throws the error that says what is wrong
    throw Error(ErrorCode::kNotAPool, fmt::format("{} is neither a version-1 nor a current pool", loc.path));
  }
  // The newest intact header of either version describes the pool.
  int src = -1;
  uint64_t generation = 0;
  for (int c = 0; c < 2; ++c)
    if ((is_old[c] || is_current[c]) && (src < 0 || old[c].generation > generation)) src = c, generation = old[c].generation;
  PoolHeader h = is_current[src] ? current[src] : format::v1::upgrade(old[src]);
  format::validate_header(h, size);
  // Seal a maintenance record that is in progress (version 1 had no checksum), before any header
  // says the pool is version 2.
  format::MaintenanceRecord rec{};
  if (pread(fd, &rec, sizeof rec, format::kMaintenanceOffset) != sizeof rec) io_error("cannot read", loc.path, errno);
  if (rec.move_state == format::kMoveInProgress) {
    rec.move_checksum = format::move_record_checksum(rec.move_from, rec.move_to);
    if (pwrite(fd, &rec, sizeof rec, format::kMaintenanceOffset) != sizeof rec) io_error("cannot write", loc.path, errno);
  }
  if (fdatasync(fd) != 0) io_error("cannot sync", loc.path, errno);
  // Both copies, the older one first, each with a higher generation: a crash in between leaves one
  // valid current copy, which a later convert (or open) uses.
  const int first = old[0].generation <= old[1].generation ? 0 : 1;
  for (int c : {first, 1 - first}) {
    h.generation = ++generation;
    format::seal(h);
    if (pwrite(fd, &h, sizeof h, static_cast<off_t>(format::kHeaderCopyOffset[c])) != sizeof h)
      io_error("cannot write the header of", loc.path, errno);
    if (fdatasync(fd) != 0) io_error("cannot sync", loc.path, errno);
  }
  return true;
}

void Pool::mark_open_dirty() {
  if (header_.clean_shutdown == 0) return;
  PoolHeader h = header_;
  h.clean_shutdown = 0;
  write_header(h);
}

void Pool::mark_clean(uint64_t item_count) {
  PoolHeader h = header_;
  h.clean_shutdown = 1;
  h.item_count = item_count;
  write_header(h);
}

void Pool::set_header(const PoolHeader& h) {
  header_ = h;
  if (attachment_offset_ != h.attachment_offset) attachment_offset_ = h.attachment_offset;
  if (attachment_bytes_ != h.attachment_bytes) attachment_bytes_ = h.attachment_bytes;
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
  set_header(h);
  current_copy_ = target;
  other_copy_invalid_ = false;
}

PoolHeader Pool::initial_header(uint32_t index_kind) const {
  PoolHeader h{};
  std::memcpy(h.magic, format::kMagic, sizeof h.magic);
  h.byte_order = format::kByteOrderMark;
  h.version_major = format::kFormatMajor;
  h.version_minor = format::kFormatMinor;
  std::random_device rd;
  for (auto& b : h.uuid) b = static_cast<unsigned char>(rd());
  h.created_unix_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  h.index_kind = index_kind;
  h.extent_align_log2 = header_.extent_align_log2;
  h.pool_used = header_.pool_used;
  h.pool_size = header_.pool_size;
  h.clean_shutdown = 1;
  return h;
}

void Pool::write_initial_header(PoolHeader h) {
  h.generation = 1;
  format::seal(h);
  for (uint64_t off : format::kHeaderCopyOffset) std::memcpy(static_cast<void*>(at<PoolHeader>(off)), &h, sizeof h);
  persist(base_, 2 * sizeof h);
  set_header(h);
  current_copy_ = 0;
  sync();
}

uint64_t Pool::allocate_extent(PoolHeader& h, uint64_t bytes, Populate populate) {
  const uint64_t align = uint64_t{1} << h.extent_align_log2;
  const uint64_t offset = align_up(h.pool_used, align);
  const uint64_t end = align_up(offset + bytes, align);
  // A torn header write may have left an older attempt's bytes past pool_used: clear them.
  if (offset < file_size_) {
    uint64_t stale_end = std::min(end, file_size_);
    if (fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                  static_cast<off_t>(stale_end - offset)) != 0)
      std::memset(base_ + offset, 0, stale_end - offset);
    // A snapshot may hold those bytes. (The part grown below is new and zero, as a restore
    // leaves every page no snapshot wrote, so it needs no mark.)
    dirty_pages_->mark(offset, stale_end - offset);
  }
  grow_file(end, populate);
  h.pool_used = offset + bytes;
  h.pool_size = std::max(h.pool_size, end);
  return offset;
}

void Pool::populate(void* p, uint64_t n) const {
  if (kind_ != PoolKind::kShm && kind_ != PoolKind::kMemory) return;  // fallocate gave the blocks
  // madvise takes whole pages; extents are page aligned.
  auto* first = reinterpret_cast<std::byte*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095});
  const uint64_t bytes = align_up(static_cast<uint64_t>(static_cast<std::byte*>(p) + n - first), 4096);
  if (madvise(first, bytes, MADV_POPULATE_WRITE) == 0) return;
  int err = errno;
  if (err == EINVAL) {  // a kernel before 5.14: reserve the blocks instead
    if (fallocate(fd_, 0, static_cast<off_t>(first - base_), static_cast<off_t>(bytes)) == 0) return;
    err = errno;
  }
  if (err == EFAULT || err == ENOMEM || err == ENOSPC)
    throw Error(ErrorCode::kNoSpace, fmt::format("no space in pool {}: its file system is full", path_));
  io_error("cannot populate pool pages", path_, err);
}

void Pool::release_extent(uint64_t offset, uint64_t bytes) {
  if (copy_on_write_) return;  // the file is not ours to change
  wait_ahead();
  // Best effort: the memory returns to the file system; reads would see zeros. No dirty mark: a
  // restore clears every range outside the header's extents (src/snapshot/restore.cpp).
  (void)fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset), static_cast<off_t>(bytes));
}

void Pool::persist(const void* p, size_t n) const {
  dirty_pages_->mark(static_cast<uint64_t>(static_cast<const std::byte*>(p) - base_), n);
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

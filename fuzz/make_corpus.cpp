// Writes the seed corpus of pool_open_fuzzer into a folder: small valid pools of each key width,
// shape and value kind (inline, heap), clean and not, each behind the fuzzer's mode byte (see
// pool_open_fuzzer.cpp). Capacity 16 keeps every seed under ~100 KB.
//
//   pool_fuzz_corpus OUT_DIR
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "format/header.h"
#include "format/slot.h"
#include "gphash/table.h"

namespace {

using Bytes = std::vector<unsigned char>;

Bytes read_file(const std::string& path) {
  Bytes b;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return b;
  struct stat st {};
  if (fstat(fd, &st) == 0) {
    b.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < b.size()) {
      ssize_t n = pread(fd, b.data() + done, b.size() - done, static_cast<off_t>(done));
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    b.resize(done);
  }
  ::close(fd);
  return b;
}

void write_seed(const std::string& dir, const std::string& name, uint8_t mode, const Bytes& pool) {
  const std::string path = dir + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(&mode, 1, 1, f) != 1 || std::fwrite(pool.data(), 1, pool.size(), f) != pool.size() ||
      std::fclose(f) != 0) {
    std::fprintf(stderr, "pool_fuzz_corpus: cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::printf("%-28s %7zu bytes\n", name.c_str(), pool.size() + 1);
}

void fill(gphash::Table& t, uint64_t n, uint64_t first) {
  const uint32_t kw = t.key_width(), vw = t.value_width();
  Bytes keys(n * kw, 0), values(n * vw);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t k = first + i;
    std::memcpy(keys.data() + i * kw, &k, sizeof k);
    for (uint32_t j = 0; j < vw; ++j) values[i * vw + j] = static_cast<unsigned char>(k + j);
  }
  std::vector<gphash::OpStatus> status(n);
  gphash::Batch b;
  b.size = n;
  b.key_width = kw;
  b.value_width = vw;
  b.op = gphash::Op::kUpsert;
  b.keys = keys.data();
  b.values = values.data();
  b.status = status.data();
  t.execute(b);
}

// A resize cut short after its first step: a new, empty top level is allocated and the header
// says kResizeRehashing, so opening the pool finishes the resize in recovery.
void make_resizing(Bytes& pool) {
  namespace format = gphash::format;
  uint64_t size = pool.size();
  for (uint64_t off : format::kHeaderCopyOffset) {
    format::PoolHeader h;
    std::memcpy(static_cast<void*>(&h), pool.data() + off, sizeof h);
    const uint64_t align = uint64_t{1} << h.extent_align_log2;
    const uint32_t level = format::top_level(h) + 1;
    const uint64_t at = (h.pool_used + align - 1) / align * align;
    h.gphash.level_offset[level] = at;
    h.pool_used = at + format::level_bytes(h, level);
    h.pool_size = std::max(h.pool_size, (h.pool_used + align - 1) / align * align);
    h.gphash.resize_state = format::kResizeRehashing;
    h.clean_shutdown = 0;
    format::seal(h);
    std::memcpy(pool.data() + off, &h, sizeof h);
    size = std::max(size, h.pool_size);
  }
  pool.resize(size, 0);
}

// Every seed must open (recovering where it is dirty) and pass the checker, or the corpus is
// wrong: the fuzzer should start from pools that reach the engine.
void verify_opens(const std::string& scratch, const Bytes& pool, const char* name) {
  std::remove(scratch.c_str());
  std::FILE* f = std::fopen(scratch.c_str(), "wb");
  if (!f || std::fwrite(pool.data(), 1, pool.size(), f) != pool.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "pool_fuzz_corpus: cannot write %s\n", scratch.c_str());
    std::exit(1);
  }
  gphash::OpenOptions options;
  options.threads = 1;
  gphash::Table t = gphash::Table::open(scratch, options);
  gphash::CheckResult r = t.check(1);
  if (!r.ok) {
    std::fprintf(stderr, "pool_fuzz_corpus: seed %s fails its check: %s\n", name, r.violation.c_str());
    std::exit(1);
  }
}

struct Seed {
  const char* name;
  gphash::TableConfig config;
  uint64_t items;
  enum { kClean, kDirty, kDirtyWithMove, kResizing } state;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  mkdir(dir.c_str(), 0755);
  const std::string scratch = "/dev/shm/gphash-fuzz-corpus-" + std::to_string(getpid());
  const Seed seeds[] = {
      // Every shape with every key width, inline and heap values.
      {"k8-v8-2L2H8S", {8, 8, {2, 2, 8}, 16, 1}, 20, Seed::kClean},
      {"k8-v1-2L2H8S-empty", {8, 1, {2, 2, 8}, 16, 2}, 0, Seed::kClean},
      {"k8-v24-2L2H8S-grown", {8, 24, {2, 2, 8}, 16, 3}, 150, Seed::kClean},  // resized, heap of 2+ chunks
      {"k16-v32-2L2H8S", {16, 32, {2, 2, 8}, 16, 4}, 20, Seed::kClean},
      {"k32-v8-2L2H8S-dirty", {32, 8, {2, 2, 8}, 16, 5}, 20, Seed::kDirty},
      {"k8-v16-4L2H4S-dirty-move", {8, 16, {4, 2, 4}, 16, 6}, 30, Seed::kDirtyWithMove},
      {"k16-v32-4L2H4S", {16, 32, {4, 2, 4}, 16, 7}, 30, Seed::kClean},
      {"k32-v64-4L2H4S-dirty-move", {32, 64, {4, 2, 4}, 16, 8}, 20, Seed::kDirtyWithMove},
      {"k8-v8-1L4H8S-dirty", {8, 8, {1, 4, 8}, 16, 9}, 20, Seed::kDirty},
      {"k16-v8-1L4H8S-dirty-move", {16, 8, {1, 4, 8}, 16, 10}, 40, Seed::kDirtyWithMove},
      {"k32-v100-1L4H8S", {32, 100, {1, 4, 8}, 16, 11}, 25, Seed::kClean},
      {"k8-v32-2L2H8S-resizing", {8, 32, {2, 2, 8}, 16, 12}, 20, Seed::kResizing},
      {"k16-v8-4L2H4S-resizing", {16, 8, {4, 2, 4}, 16, 13}, 30, Seed::kResizing},
  };
  try {
    for (const Seed& s : seeds) {
      std::remove(scratch.c_str());
      Bytes pool;
      {
        gphash::OpenOptions options;
        options.threads = 1;
        gphash::Table t = gphash::Table::create(scratch, s.config, options);
        if (s.items) fill(t, s.items, 1);
        if (s.state != Seed::kClean) {
          // The pool as a crash would leave it: marked dirty, item_count stale.
          pool = read_file(scratch);
          if (s.state == Seed::kDirtyWithMove) {
            // A displacement cut short: the maintenance record names two slots of the bottom level.
            gphash::format::PoolHeader h, other;
            std::memcpy(static_cast<void*>(&h), pool.data(), sizeof h);
            std::memcpy(static_cast<void*>(&other), pool.data() + gphash::format::kHeaderCopyOffset[1], sizeof other);
            if (other.generation > h.generation) h = other;  // the current header
            gphash::format::MaintenanceRecord rec{};
            rec.move_state = gphash::format::kMoveInProgress;
            rec.move_from = gphash::format::pack({h.gphash.bottom_level, 0, 0});
            rec.move_to = gphash::format::pack({h.gphash.bottom_level, 0, 1});
            rec.move_checksum = gphash::format::move_record_checksum(rec.move_from, rec.move_to);
            std::memcpy(pool.data() + gphash::format::kMaintenanceOffset, &rec, sizeof rec);
          }
        }
      }
      if (s.state == Seed::kClean || s.state == Seed::kResizing) pool = read_file(scratch);
      if (s.state == Seed::kResizing) make_resizing(pool);
      verify_opens(scratch, pool, s.name);
      write_seed(dir, std::string(s.name) + "-m0", 0, pool);
      write_seed(dir, std::string(s.name) + "-m3", 3 | 8, pool);  // resealed headers, writing batch
    }
  } catch (const gphash::Error& e) {
    std::fprintf(stderr, "pool_fuzz_corpus: %s\n", e.what());
    std::remove(scratch.c_str());
    return 1;
  }
  std::remove(scratch.c_str());
  return 0;
}

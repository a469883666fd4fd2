// libFuzzer target for the pool-open path: any file must either open or be refused with a typed
// gphash::Error. Any other exception, a signal, a sanitizer report, a leak or a hang is a bug.
//
// Input: one mode byte, then the bytes of the pool file.
//   bit 0, bit 1: recompute the checksum of header copy 0 / copy 1 before writing the file, so
//                 that mutated header fields get past the checksum and reach the field checks
//   bit 2:        open read-only
//   bit 3:        after opening, also run a writing batch (insert, upsert, erase)
// Every opened table is also searched and checked, and closed (which writes its header).
// The seeds from pool_fuzz_corpus (make_corpus.cpp) are valid pools with a mode byte in front.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "format/header.h"
#include "gphash/table.h"

namespace {

// The pool file of one input, in $GPHASH_FUZZ_DIR (scripts/fuzz.sh makes a private folder in
// /dev/shm and removes it afterwards, also after a crash) or else in /dev/shm.
class TempFile {
 public:
  TempFile() {
    static std::atomic<uint64_t> counter{0};
    static const std::string dir = [] {
      const char* d = std::getenv("GPHASH_FUZZ_DIR");
      return std::string(d && *d ? d : "/dev/shm");
    }();
    path_ = dir + "/gphash-fuzz-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void write_all(const std::string& path, const unsigned char* data, size_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::perror("fuzzer: cannot create its pool file");
    std::abort();  // a harness problem, not a finding; abort loudly
  }
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) {
      std::perror("fuzzer: cannot write its pool file");
      std::abort();
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

// Runs one batch of `op` on `n` keys derived from `salt`; statuses are not checked (the table may
// be corrupt in ways the header cannot show), only that the call ends in a status or an Error.
void run_batch(gphash::Table& t, gphash::Op op, size_t n, uint64_t salt) {
  const uint32_t kw = t.key_width(), vw = t.value_width();
  std::vector<unsigned char> keys(n * kw), values(n * vw, 0x5A), out(n * vw);
  for (size_t i = 0; i < n; ++i) {
    uint64_t k = (i < n / 2) ? i + 1 : (salt + i) * 0x9E3779B97F4A7C15ull;  // small keys and scattered ones
    std::memcpy(keys.data() + i * kw, &k, sizeof k);
  }
  std::vector<gphash::OpStatus> status(n);
  gphash::Batch b;
  b.size = n;
  b.key_width = kw;
  b.value_width = vw;
  b.op = op;
  b.keys = keys.data();
  b.values = values.data();
  b.values_out = op == gphash::Op::kSearch ? out.data() : nullptr;
  b.status = status.data();
  t.execute(b);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  std::vector<unsigned char> bytes(data + 1, data + size);
  for (int c = 0; c < 2; ++c) {
    const uint64_t offset = gphash::format::kHeaderCopyOffset[c];
    if (!(mode >> c & 1) || bytes.size() < offset + gphash::format::kHeaderBytes) continue;
    gphash::format::PoolHeader h;
    std::memcpy(static_cast<void*>(&h), bytes.data() + offset, sizeof h);
    gphash::format::seal(h);
    std::memcpy(bytes.data() + offset, &h, sizeof h);
  }
  TempFile file;
  write_all(file.path(), bytes.data(), bytes.size());

  try {
    (void)gphash::Table::inspect(file.path());
  } catch (const gphash::Error&) {
  }

  gphash::OpenOptions options;
  options.threads = 1;
  options.read_only = (mode & 4) != 0;
  options.max_pool_bytes = uint64_t{64} << 20;  // resizes and heap growth stay small
  try {
    gphash::Table t = gphash::Table::open(file.path(), options);
    (void)t.info();
    run_batch(t, gphash::Op::kSearch, 64, mode);
    if ((mode & 8) && !options.read_only) {
      run_batch(t, gphash::Op::kInsert, 96, 1);
      run_batch(t, gphash::Op::kUpsert, 32, 2);
      run_batch(t, gphash::Op::kErase, 32, 1);
      run_batch(t, gphash::Op::kSearch, 64, 3);
    }
    (void)t.check(1);
    t.close();
  } catch (const gphash::Error&) {
    // Expected for most inputs: a typed refusal.
  }
  return 0;
}

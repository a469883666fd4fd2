// GPM crash tests (label gpu; skipped without a GPU). A child (gpm_crash_child) runs a workload
// batch after batch and reports each durable batch; the parent kills it with SIGKILL at a random
// moment with kernels in flight, or (crash-point builds) the child's GPU thread traps at its N-th
// GPM store (GPHASH_GPM_CRASH_AFTER=N). The parent then opens the pool on the CPU (recovery runs
// at open) and checks that every transaction is wholly done or wholly undone and nothing
// acknowledged is lost:
//   gpKVS: every key of an acknowledged batch holds the value of the last acknowledged batch or
//          of the one in flight; a way's key and value belong together; no key twice in a bucket;
//   gpDB:  each row's four updated columns carry one stamp, the last acknowledged or the next;
//   solver: the restored checkpoint is at or after the last acknowledged one, and equals the CPU
//          reference at its iteration.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "engines/gpu/gpu_engine.h"
#include "gpm/gpm.h"
#include "gpm_crash_common.h"

namespace gphash {
namespace {

namespace wl = gpm::workloads;

struct ChildResult {
  uint64_t acked = 0;
  bool opened = false, done = false;
  std::string error;
};

// Runs the child; kills it after `kill_after` (or lets it finish when negative).
ChildResult run_child(const std::string& pool, const std::string& workload, uint64_t batches, double kill_after,
                      const std::string& env = {}) {
  const std::string out = pool + ".out";
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    if (!env.empty()) putenv(const_cast<char*>(env.c_str()));
    const std::string n = std::to_string(batches);
    execl(GPHASH_GPM_CRASH_CHILD, "gpm_crash_child", pool.c_str(), workload.c_str(), n.c_str(), nullptr);
    _exit(127);
  }
  if (kill_after >= 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kill_after));
    kill(pid, SIGKILL);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ChildResult r;
  std::ifstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line == "opened") r.opened = true;
    if (line == "done") r.done = true;
    if (line.rfind("acked ", 0) == 0) r.acked = std::stoull(line.substr(6));
    if (line.rfind("error ", 0) == 0) r.error = line;
  }
  std::remove(out.c_str());
  return r;
}

// Verifies the pool at `path` after a crash; returns an empty string when it holds.
std::string verify(const std::string& path, const std::string& workload, uint64_t acked) {
  auto gp = gpm::GpmPool::open(path);  // recovery
  std::ostringstream why;
  if (workload == "solver") {
    gpm::GroupInfo g;
    try {
      g = gp->group("solver");
    } catch (const Error&) {
      return acked == 0 ? "" : "the solver's group is missing";
    }
    std::vector<uint64_t> x(gpmcrash::kSolverWords);
    uint64_t it = 0;
    const gpm::CheckpointState st = gp->restore_to_host(g, {x.data(), &it});
    if (st.sequence == 0) return acked == 0 ? "" : "no checkpoint, but one was acknowledged";
    if (it < acked) why << "restored iteration " << it << " is older than the acknowledged " << acked;
    else if (x != wl::Solver::reference(gpmcrash::kSolverWords, it)) why << "checkpoint of iteration " << it << " is wrong";
    return why.str();
  }
  if (workload.rfind("kvs", 0) == 0) {
    gpm::Region r;
    try {
      r = gp->region("kvs.table");
    } catch (const Error&) {
      return acked == 0 ? "" : "the table is missing";
    }
    const auto* t = reinterpret_cast<const uint64_t*>(r.host);
    std::vector<uint64_t> value(gpmcrash::kKvsKeys + 1, 0);
    for (uint64_t b = 0; b < gpmcrash::kKvsBuckets; ++b)
      for (uint32_t w = 0; w < wl::kWays; ++w) {
        const uint64_t k = t[b * 16 + w], v = t[b * 16 + 8 + w];
        if (k == 0) {
          if (v != 0) return "an empty way holds a value (a torn insert)";
          continue;
        }
        if (k > gpmcrash::kKvsKeys || (wl::Kvs::bucket_of(k, gpmcrash::kKvsBuckets, 0) != b &&
                                             wl::Kvs::bucket_of(k, gpmcrash::kKvsBuckets, 1) != b)) return "a key in the wrong bucket";
        if (value[k] != 0) return "a key twice";
        value[k] = v;
      }
    for (uint64_t k = 1; k <= gpmcrash::kKvsKeys; ++k) {
      const uint64_t v = value[k];
      const bool ok = (acked == 0 && (v == 0 || v == gpmcrash::kvs_value(k, 0))) ||
                      (acked > 0 && (v == gpmcrash::kvs_value(k, acked - 1) || v == gpmcrash::kvs_value(k, acked)));
      if (!ok) {
        why << "key " << k << " holds " << v << " after " << acked << " acknowledged batches";
        return why.str();
      }
    }
    return "";
  }
  gpm::Region r;
  try {
    r = gp->region("db.table");
  } catch (const Error&) {
    return acked == 0 ? "" : "the table is missing";
  }
  const auto* t = reinterpret_cast<const uint64_t*>(r.host);
  for (uint64_t row = 0; row < gpmcrash::kDbRows; ++row) {
    const uint64_t* cols = t + row * wl::Db::kColumns;
    if (acked == 0) {
      bool zero = true, one = true;
      for (uint32_t c = 0; c < wl::Db::kColumns; ++c) {
        zero &= cols[c] == 0;
        one &= cols[c] == wl::Db::row_value(row, c, 1);
      }
      if (!zero && !one) return "a half-inserted row";
      continue;
    }
    bool found = false;
    for (uint64_t stamp : {acked, acked + 1}) {
      bool all = true;
      for (uint32_t c = 0; c < 4; ++c) all &= cols[c] == wl::Db::row_value(row, c, stamp);
      found |= all;
    }
    for (uint32_t c = 4; c < wl::Db::kColumns; ++c) found &= cols[c] == wl::Db::row_value(row, c, 1);
    if (!found) {
      why << "row " << row << " is half updated or lost an acknowledged update (" << acked << " batches acknowledged)";
      return why.str();
    }
  }
  return "";
}

const char* const kWorkloads[] = {"kvs-hcl-undo", "kvs-hcl-redo", "kvs-conventional-undo", "kvs-conventional-redo",
                                  "db-hcl-undo",  "db-hcl-redo",  "db-conventional-undo",  "db-conventional-redo",
                                  "solver"};

std::string pool_path(const std::string& tag) { return "/dev/shm/gphash-gpmcrash-" + std::to_string(getpid()) + "-" + tag; }

TEST(GpmKill, SigkillWithKernelsInFlightRecoversEveryWorkload) {
  std::string why;
  if (!engine::gpu_available(&why)) GTEST_SKIP() << "no GPU: " << why;
  const int rounds = std::getenv("GPHASH_GPM_KILLS") ? std::atoi(std::getenv("GPHASH_GPM_KILLS")) : 2;
  const auto start = std::chrono::steady_clock::now();
  std::mt19937_64 rng(77);
  int kills = 0;
  for (const char* w : kWorkloads)
    for (int i = 0; i < rounds; ++i) {
      const std::string path = pool_path(std::string(w) + "-" + std::to_string(i));
      std::remove(path.c_str());
      const double delay = 0.5 + (rng() % 2000) / 1000.0;  // CUDA start-up takes a few hundred ms
      const ChildResult r = run_child(path, w, 1000000, delay);
      ASSERT_TRUE(r.error.empty()) << w << ": " << r.error;
      if (r.opened) {
        const std::string v = verify(path, w, r.acked);
        ASSERT_TRUE(v.empty()) << w << " killed after " << r.acked << " acknowledged batches: " << v;
        ++kills;
      }
      std::fprintf(stderr, "[gpm kill] %s round %d: killed after %.2f s, %llu batches acknowledged%s (%.1f s so far)\n", w, i,
                   delay, static_cast<unsigned long long>(r.acked), r.opened ? ", verified" : ", not yet open",
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      std::remove(path.c_str());
    }
  std::printf("GPM kill test: %d kills verified\n", kills);
  EXPECT_GT(kills, 0);
}

#if GPHASH_CRASH_POINTS
TEST(GpmTrap, TrapAfterNStoresRecoversEveryWorkload) {
  std::string why;
  if (!engine::gpu_available(&why)) GTEST_SKIP() << "no GPU: " << why;
  int traps = 0;
  for (const char* w : kWorkloads)
    for (uint64_t n = 1; n < (uint64_t{1} << 40); n = n * 5 + 3) {
      const std::string path = pool_path(std::string("trap-") + w + "-" + std::to_string(n));
      std::remove(path.c_str());
      const ChildResult r = run_child(path, w, 4, -1, "GPHASH_GPM_CRASH_AFTER=" + std::to_string(n));
      if (r.opened) {
        const std::string v = verify(path, w, r.acked);
        ASSERT_TRUE(v.empty()) << w << " trapped at store " << n << " after " << r.acked << " batches: " << v;
      }
      std::remove(path.c_str());
      if (r.done) break;  // fewer stores than n: deeper traps would not fire
      ++traps;
    }
  std::printf("GPM trap injection: %d traps verified\n", traps);
  EXPECT_GT(traps, 20);
}
#endif

}  // namespace
}  // namespace gphash

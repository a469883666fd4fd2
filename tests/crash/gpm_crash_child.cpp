// The child the GPM crash test kills: runs one workload on a GPM pool batch after batch and prints
// "acked N" (flushed) after the N-th batch is durable, until killed, trapped, or done.
//   gpm_crash_child POOL WORKLOAD BATCHES    WORKLOAD: kvs-hcl-undo ... db-conventional-redo, solver
// In crash-point builds GPHASH_GPM_CRASH_AFTER=N makes the GPU thread of the N-th GPM store trap.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gphash/error.h"
#include "gpm/examples/workloads.h"
#include "gpm_crash_common.h"

using namespace gphash;
namespace wl = gpm::workloads;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: gpm_crash_child POOL WORKLOAD BATCHES\n");
    return 2;
  }
  const std::string path = argv[1], workload = argv[2];
  const uint64_t batches = std::strtoull(argv[3], nullptr, 10);
  try {
    cudaStream_t s;
    cudaStreamCreate(&s);
    auto gp = gpm::GpmPool::create(path);
    gpm::DeviceGpm dev(*gp);
    std::printf("opened\n");
    std::fflush(stdout);
    if (workload == "solver") {
      wl::Solver solver(*gp, dev, "solver", true, gpmcrash::kSolverWords);
      for (uint64_t it = gpmcrash::kSolverEvery; it <= batches * gpmcrash::kSolverEvery; it += gpmcrash::kSolverEvery) {
        solver.run(it, gpmcrash::kSolverEvery, s);
        std::printf("acked %llu\n", static_cast<unsigned long long>(it));
        std::fflush(stdout);
      }
    } else {
      const wl::LogChoice log = gpmcrash::log_of(workload);
      if (workload.rfind("kvs", 0) == 0) {
        wl::Kvs kvs(*gp, dev, "kvs", true, gpmcrash::kKvsBuckets, log, gpmcrash::kKvsKeys);
        std::vector<uint64_t> keys(gpmcrash::kKvsKeys), values(keys.size());
        for (uint64_t i = 0; i < keys.size(); ++i) keys[i] = i + 1;
        uint64_t *dk, *dv;
        cudaMalloc(&dk, keys.size() * 8);
        cudaMalloc(&dv, keys.size() * 8);
        cudaMemcpy(dk, keys.data(), keys.size() * 8, cudaMemcpyHostToDevice);
        for (uint64_t b = 0; b < batches; ++b) {
          for (uint64_t i = 0; i < keys.size(); ++i) values[i] = gpmcrash::kvs_value(keys[i], b);
          cudaMemcpy(dv, values.data(), values.size() * 8, cudaMemcpyHostToDevice);
          if (kvs.set(dk, dv, keys.size(), s) != 0) throw Error(ErrorCode::kNoSpace, "gpKVS: a bucket was full");
          std::printf("acked %llu\n", static_cast<unsigned long long>(b + 1));
          std::fflush(stdout);
        }
      } else {
        wl::Db db(*gp, dev, "db", true, gpmcrash::kDbRows, log, gpmcrash::kDbRows);
        for (uint64_t b = 0; b < batches; ++b) {
          if (b == 0)
            db.insert(0, gpmcrash::kDbRows, 1, s);
          else
            db.update(b, 2 * b + 1, gpmcrash::kDbRows, b + 1, s);
          std::printf("acked %llu\n", static_cast<unsigned long long>(b + 1));
          std::fflush(stdout);
        }
      }
    }
    std::printf("done\n");
    return 0;
  } catch (const std::exception& e) {
    std::printf("error %s\n", e.what());
    return 1;
  }
}

// How HMEH runs work on several threads: OpenMP, as the GPHash CPU engine does, or std::thread
// in the ThreadSanitizer build (GPHASH_HMEH_STD_THREADS): libgomp is not instrumented, so TSan
// would report its barriers as races, while std::thread's creation and join are understood.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#if !GPHASH_HMEH_STD_THREADS
#include <omp.h>
#endif

namespace gphash::hmeh {

// Calls f(tid) for tid in [0, threads), each on its own thread, and waits for all.
template <class F>
void run_parallel(int threads, F&& f) {
  if (threads <= 1) {
    f(0);
    return;
  }
#if GPHASH_HMEH_STD_THREADS
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back([&f, t] { f(t); });
  f(0);
  for (std::thread& w : workers) w.join();
#else
#pragma omp parallel num_threads(threads)
  f(omp_get_thread_num());
#endif
}

// Calls f(tid, i) for every i in [0, n), in chunks handed out dynamically.
template <class F>
void parallel_for(int threads, uint64_t n, uint64_t chunk, F&& f) {
  std::atomic<uint64_t> next{0};
  run_parallel(std::max(1, static_cast<int>(std::min<uint64_t>(threads, (n + chunk - 1) / std::max<uint64_t>(chunk, 1)))),
               [&](int tid) {
                 for (uint64_t begin; (begin = next.fetch_add(chunk, std::memory_order_relaxed)) < n;)
                   for (uint64_t i = begin, end = std::min(n, begin + chunk); i < end; ++i) f(tid, i);
               });
}

inline int default_threads() {
#if GPHASH_HMEH_STD_THREADS
  return std::max(1u, std::thread::hardware_concurrency());
#else
  return std::max(1, omp_get_max_threads());
#endif
}

}  // namespace gphash::hmeh

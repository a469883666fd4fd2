// The plan's sort (src/engines/gpu/plan_sort.cu: cub's radix sort, with smaller tiles for small
// host-mapped batches) against std::stable_sort, with and without small tiles: sizes on both
// sides of the small-tile limit, keys that repeat as a batch's hot keys do, the largest key, and
// under graph capture.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "engines/gpu/plan_sort.h"

namespace {

using gphash::engine::gpu::kSmallTilesMax;
using gphash::engine::gpu::plan_sort_pairs;

struct Buffers {
  uint32_t* p[4] = {};
  void* temp = nullptr;
  size_t temp_bytes = 0;
  bool small_tiles;
  Buffers(size_t n, bool small) : small_tiles(small) {
    for (auto& b : p) EXPECT_EQ(cudaMalloc(&b, std::max<size_t>(n, 1) * sizeof(uint32_t)), cudaSuccess);
    plan_sort_pairs(nullptr, temp_bytes, p[0], p[2], p[1], p[3], n, small_tiles, nullptr);
    EXPECT_EQ(cudaMalloc(&temp, std::max<size_t>(temp_bytes, 1)), cudaSuccess);
  }
  ~Buffers() {
    for (auto* b : p) cudaFree(b);
    cudaFree(temp);
  }
  void sort(size_t n, cudaStream_t stream) { plan_sort_pairs(temp, temp_bytes, p[0], p[2], p[1], p[3], n, small_tiles, stream); }
};

enum class Keys { kRandom, kFewDistinct, kAllEqual, kLargest, kHot };

std::vector<uint32_t> make_keys(Keys kind, size_t n, std::mt19937& rng) {
  std::vector<uint32_t> keys(n);
  for (size_t i = 0; i < n; ++i) {
    switch (kind) {
      case Keys::kRandom: keys[i] = static_cast<uint32_t>(rng()); break;
      case Keys::kFewDistinct: keys[i] = static_cast<uint32_t>(rng() % 16) << 28 | static_cast<uint32_t>(rng() % 3); break;
      case Keys::kAllEqual: keys[i] = 0x12345678u; break;
      case Keys::kLargest: keys[i] = rng() % 2 ? ~0u : static_cast<uint32_t>(rng()); break;
      case Keys::kHot: keys[i] = rng() % 10 < 6 ? 0xABCDEF01u : static_cast<uint32_t>(rng()); break;
    }
  }
  return keys;
}

// Sorts on the GPU (captured into a graph and replayed when `graph`), checks against the
// stable sort of the same pairs.
void check_with(Keys kind, size_t n, bool graph, uint32_t seed, bool small_tiles) {
  std::mt19937 rng(seed);
  const std::vector<uint32_t> keys = make_keys(kind, n, rng);
  std::vector<uint32_t> values(n);
  for (auto& v : values) v = static_cast<uint32_t>(rng());  // pairs must move together
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });

  Buffers b(n, small_tiles);
  const size_t bytes = n * sizeof(uint32_t);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  // On the sort's stream: a cudaMemcpy from pageable memory may return before its DMA lands, and
  // a non-blocking stream does not wait for it (the suite's parallel runs read unwritten keys).
  ASSERT_EQ(cudaMemcpyAsync(b.p[0], keys.data(), bytes, cudaMemcpyHostToDevice, stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(b.p[1], values.data(), bytes, cudaMemcpyHostToDevice, stream), cudaSuccess);
  if (graph) {
    cudaGraph_t g;
    cudaGraphExec_t exec;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    b.sort(n, stream);
    ASSERT_EQ(cudaStreamEndCapture(stream, &g), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
    for (int i = 0; i < 2; ++i) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
  } else {
    b.sort(n, stream);
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  std::vector<uint32_t> out_keys(n), out_values(n);
  ASSERT_EQ(cudaMemcpy(out_keys.data(), b.p[2], bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(out_values.data(), b.p[3], bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  size_t wrong = 0, first_wrong = n;
  for (size_t i = 0; i < n; ++i)
    if (out_keys[i] != keys[order[i]] || out_values[i] != values[order[i]]) {
      if (wrong++ == 0) first_wrong = i;
    }
  EXPECT_EQ(wrong, 0u) << "kind " << static_cast<int>(kind) << ", n " << n << ", small tiles " << small_tiles
                       << ": first at " << first_wrong;
}

void check(Keys kind, size_t n, bool graph, uint32_t seed) {
  for (const bool small_tiles : {true, false}) check_with(kind, n, graph, seed, small_tiles);
}

TEST(PlanSort, MatchesStableSortAtEverySize) {
  uint32_t seed = 1;
  for (const size_t n : {size_t{1}, size_t{2}, size_t{31}, size_t{1000}, size_t{4865}, size_t{8193}, size_t{65536},
                         kSmallTilesMax, kSmallTilesMax + 1, size_t{1} << 20})
    check(Keys::kRandom, n, /*graph=*/false, seed++);
}

TEST(PlanSort, KeepsTheOrderOfEqualKeys) {
  uint32_t seed = 100;
  for (const Keys kind : {Keys::kFewDistinct, Keys::kAllEqual, Keys::kLargest, Keys::kHot})
    for (const size_t n : {size_t{5000}, size_t{8192 * 3 + 17}, size_t{65536}, kSmallTilesMax + 1})
      check(kind, n, /*graph=*/false, seed++);
}

TEST(PlanSort, ReplaysUnderAGraph) {
  check(Keys::kHot, size_t{65536}, /*graph=*/true, 7);
  check(Keys::kRandom, 12345, /*graph=*/true, 8);
}

}  // namespace

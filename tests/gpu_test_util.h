// What the GPU test suites share: skipping without a GPU, GPU-engine options, GPU memory and a
// stream that free themselves.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engines/gpu/gpu_engine.h"
#include "gphash/table.h"

#define REQUIRE_GPU()                                                                   \
  do {                                                                                  \
    std::string why;                                                                    \
    if (!::gphash::engine::gpu_available(&why)) GTEST_SKIP() << "no GPU: " << why;     \
  } while (0)

namespace gphash::testing {

inline OpenOptions gpu(Placement placement = Placement::kHostMapped) {
  OpenOptions o;
  o.engine = EngineKind::kGpu;
  o.placement = placement;
  return o;
}

// GPU memory that frees itself. Its copies wait for the whole device: the tests' streams are
// non-blocking, which the legacy default stream of cudaMemcpy does not order, and a cudaMemcpy from
// pageable memory returns before its DMA has landed: a kernel on such a stream can read the array
// before it is written (the likely cause of gpm_gpu_test's KVS finding a value no key was set to,
// 1 run in about 150 with other processes on the GPU).
template <class T>
struct Device {
  explicit Device(size_t n) : n(n) { EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess); }
  Device(const T* host, size_t count) : Device(count) {
    EXPECT_EQ(cudaMemcpy(p, host, count * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  explicit Device(const std::vector<T>& v) : Device(v.data(), v.size()) {}
  ~Device() { cudaFree(p); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  std::vector<T> get() const {
    std::vector<T> v(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  T* p = nullptr;
  size_t n;
};

struct CudaStream {
  CudaStream() { cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
  ~CudaStream() { cudaStreamDestroy(s); }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t s;
};

}  // namespace gphash::testing

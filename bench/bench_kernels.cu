#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "bench_kernels.h"
#include "format/hash.h"

namespace gphash::bench {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

__global__ void fill_keys_kernel(uint64_t* words, size_t count, uint64_t seed, uint64_t first) {
  const size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= count) return;
  uint64_t k = format::mix64((first + i) * 0x9E3779B97F4A7C15ull ^ seed);
  if (k >= 0xFFFFFFFFFFFFFFFEull) k ^= 0x8000000000000000ull;  // keep out of the reserved keys
  words[i] = k;
}

__device__ uint64_t random_offset(uint64_t& state, size_t bytes, uint32_t align) {
  state = format::mix64(state + 0x9E3779B97F4A7C15ull);
  return (state % (bytes / align)) * align;
}

__global__ void host_pattern_kernel(unsigned char* buffer, size_t bytes, HostAccessPattern p, size_t ops,
                                    unsigned long long* sink) {
  const size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= ops) return;
  uint64_t state = i * 0x2545F4914F6CDD1Dull, acc = 0;
  for (int r = 0; r < 4 && p.reads[r]; ++r) {
    const uint64_t off = random_offset(state, bytes, p.reads[r]);
    for (uint32_t k = 0; k < p.reads[r]; k += 8) acc ^= *reinterpret_cast<volatile uint64_t*>(buffer + off + k);
  }
  for (int w = 0; w < 4 && p.writes[w]; ++w) {
    const uint64_t off = random_offset(state, bytes, p.writes[w]);
    for (uint32_t k = 0; k < p.writes[w]; k += 8) *reinterpret_cast<volatile uint64_t*>(buffer + off + k) = acc + k;
    if (p.fence_after >> w & 1) __threadfence_system();
  }
  if (acc == 0x1234567) atomicAdd(sink, 1ull);  // keeps the reads alive
}

__global__ void device_reads_kernel(const unsigned char* buffer, size_t bytes, uint32_t request, size_t ops,
                                    unsigned long long* sink) {
  const size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= ops) return;
  uint64_t state = i * 0x2545F4914F6CDD1Dull, acc = 0;
  const uint64_t off = random_offset(state, bytes, request);
  for (uint32_t k = 0; k < request; k += 16) {
    const uint4 v = *reinterpret_cast<const uint4*>(buffer + off + k);
    acc ^= v.x ^ v.w;
  }
  if (acc == 0x1234567) atomicAdd(sink, 1ull);
}

template <class Launch>
double best_rate(size_t ops, Launch&& launch) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    cudaEventRecord(a);
    launch();
    cudaEventRecord(b);
    check(cudaEventSynchronize(b), "kernel");
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    best = std::max(best, ops / (ms / 1e3));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

}  // namespace

void fill_keys(uint64_t* device_words, size_t count, uint64_t seed, uint64_t first) {
  fill_keys_kernel<<<(count + 255) / 256, 256>>>(device_words, count, seed, first);
  check(cudaDeviceSynchronize(), "fill_keys");
}

double host_access_ceiling(void* host_buffer, size_t bytes, const HostAccessPattern& pattern, size_t operations) {
  void* device = nullptr;
  check(cudaHostGetDevicePointer(&device, host_buffer, 0), "host pointer");
  unsigned long long* sink;
  check(cudaMalloc(&sink, 8), "sink");
  const double rate = best_rate(operations, [&] {
    host_pattern_kernel<<<(operations + 255) / 256, 256>>>(static_cast<unsigned char*>(device), bytes, pattern,
                                                           operations, sink);
  });
  cudaFree(sink);
  return rate;
}

double device_random_reads(size_t bytes, uint32_t request_bytes, size_t operations) {
  unsigned char* buffer;
  unsigned long long* sink;
  check(cudaMalloc(&buffer, bytes), "buffer");
  check(cudaMemset(buffer, 1, bytes), "memset");
  check(cudaMalloc(&sink, 8), "sink");
  const double rate = best_rate(operations, [&] {
    device_reads_kernel<<<(operations + 255) / 256, 256>>>(buffer, bytes, request_bytes, operations, sink);
  });
  cudaFree(buffer);
  cudaFree(sink);
  return rate;
}

}  // namespace gphash::bench

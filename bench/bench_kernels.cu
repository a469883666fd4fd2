#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

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

__global__ void host_request_kernel(unsigned char* buffer, size_t region, uint32_t bytes, bool write, bool fence,
                                    size_t requests, unsigned long long* sink) {
  // As the table's kernels issue them: a warp makes 32 requests, four per instruction (8 lanes
  // of 16 bytes each), and fences once after all of them.
  constexpr int kRounds = 8;
  const int group = (threadIdx.x & 31) / 8, part = threadIdx.x & 7;
  const size_t warp = (size_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  uint64_t acc = 0;
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const size_t request = warp * 32 + r * 4 + group;
    if (request >= requests) continue;
    uint64_t state = request * 0x2545F4914F6CDD1Dull;
    const uint64_t off = random_offset(state, region, bytes < 16 ? 8 : bytes);
    if (bytes < 16) {
      if (part == 0) {
        if (write)
          *reinterpret_cast<volatile uint64_t*>(buffer + off) = request;
        else
          acc ^= __ldcg(reinterpret_cast<const unsigned long long*>(buffer + off));
      }
    } else if (part * 16u < bytes) {
      if (write)
        *reinterpret_cast<uint4*>(buffer + off + part * 16) = make_uint4(uint32_t(request), part, 1, 2);
      else
        acc ^= __ldcg(reinterpret_cast<const uint4*>(buffer + off + part * 16)).x;
    }
  }
  if (write && fence) __threadfence_system();
  if (acc == 0x1234567) atomicAdd(sink, 1ull);  // keeps the reads alive
}

__global__ void record_keys_kernel(uint64_t* words, size_t count, uint32_t key_words, uint64_t seed, uint64_t first,
                                   uint64_t mask) {
  const size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= count * key_words) return;
  uint64_t record = first + i / key_words;
  if (mask) record = (record * 0x9E3779B97F4A7C15ull) & mask;
  uint64_t k = format::mix64((record * key_words + i % key_words) * 0x9E3779B97F4A7C15ull ^ seed);
  if (k >= 0xFFFFFFFFFFFFFFFEull) k ^= 0x8000000000000000ull;
  words[i] = k;
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

__global__ void echo_kernel(const uint64_t* in, uint64_t* out, size_t words) {
  for (size_t i = threadIdx.x; i < words; i += blockDim.x) out[i] = in[i] + 1;
}

}  // namespace

double small_round_trip_seconds(size_t bytes, int calls, bool timed) {
  const size_t words = (bytes + 7) / 8;
  uint64_t *host = nullptr, *device = nullptr;
  cudaStream_t stream = nullptr;
  check(cudaMallocHost(&host, 2 * words * 8), "cudaMallocHost");
  check(cudaMalloc(&device, 2 * words * 8), "cudaMalloc");
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cudaEvent_t events[3];
  for (cudaEvent_t& e : events) check(cudaEventCreate(&e), "event");
  std::vector<double> seconds;
  for (int c = 0; c < calls + 100; ++c) {
    const auto t0 = std::chrono::steady_clock::now();
    check(cudaMemcpyAsync(device, host, words * 8, cudaMemcpyHostToDevice, stream), "copy in");
    if (timed) check(cudaEventRecord(events[0], stream), "event");
    if (timed) check(cudaEventRecord(events[1], stream), "event");
    echo_kernel<<<1, 256, 0, stream>>>(device, device + words, words);
    if (timed) check(cudaEventRecord(events[2], stream), "event");
    check(cudaMemcpyAsync(host + words, device + words, words * 8, cudaMemcpyDeviceToHost, stream), "copy out");
    check(cudaStreamSynchronize(stream), "wait");
    float ms = 0;
    if (timed) check(cudaEventElapsedTime(&ms, events[0], events[1]), "elapsed");
    if (timed) check(cudaEventElapsedTime(&ms, events[1], events[2]), "elapsed");
    if (c >= 100) seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  cudaStreamDestroy(stream);
  cudaFree(device);
  cudaFreeHost(host);
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

void fill_keys(uint64_t* device_words, size_t count, uint64_t seed, uint64_t first) {
  fill_keys_kernel<<<(count + 255) / 256, 256>>>(device_words, count, seed, first);
  check(cudaDeviceSynchronize(), "fill_keys");
}

void fill_record_keys(uint64_t* device_words, size_t count, uint32_t key_words, uint64_t seed, uint64_t first,
                      uint64_t scramble_mask) {
  record_keys_kernel<<<(count * key_words + 255) / 256, 256>>>(device_words, count, key_words, seed, first, scramble_mask);
  check(cudaDeviceSynchronize(), "fill_record_keys");
}

double host_request_rate(void* buffer, size_t offset, size_t region, uint32_t bytes, bool write, bool fence,
                         size_t requests) {
  void* device = nullptr;
  check(cudaHostGetDevicePointer(&device, buffer, 0), "host pointer");
  unsigned long long* sink;
  check(cudaMalloc(&sink, 8), "sink");
  const double rate = best_rate(requests, [&] {
    host_request_kernel<<<(requests + 255) / 256, 256>>>(static_cast<unsigned char*>(device) + offset, region, bytes,
                                                             write, fence, requests, sink);
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

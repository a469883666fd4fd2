// The floor of a small host-driven batch's round trip, by how its inputs and outputs travel:
//
//   staged   pack into pinned memory, copy in, kernel, copy out, wait (what Table::execute does for
//            batches up to 64 KiB)
//   mapped   pack into pinned memory, one kernel reading its inputs from it and writing its outputs
//            into it over PCIe; the last block to finish copies the counters out; wait
//   flag     as mapped, but the host spins on a word the last block writes instead of waiting on
//            the stream (a stream query now and then catches a failed kernel)
//
// Each operation reads one random 64-byte line of a large registered host region (a host-mapped
// table's probe) and one of GPU memory, and writes a status byte and an 8-byte value. Wall time per
// call, median and p99 over --calls calls after warm-up. Standalone: nvcc -O3 -arch=sm_90.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <vector>

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

struct Counters {
  unsigned long long found, missing, blocks_done, pad;
};

constexpr int kKeyWords = 2;  // 16-byte keys, as the server's signature index

__device__ uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

// out: statuses (n bytes, rounded to 16) then values (8 bytes each). counters_out: where the last
// block copies the counters (nullptr: left in counters for a copy).
__global__ void round_kernel(const uint64_t* keys, int n, const uint64_t* table, uint64_t table_lines,
                             const uint64_t* gpu_table, uint64_t gpu_lines, uint8_t* status, uint64_t* values,
                             Counters* counters, Counters* counters_out, volatile unsigned* flag, unsigned flag_value) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const uint64_t k0 = keys[i * kKeyWords], k1 = keys[i * kKeyWords + 1];
    const uint64_t h = mix(k0 ^ mix(k1));
    const uint64_t a = table[(h % table_lines) * 8];
    const uint64_t b = gpu_table[(mix(h) % gpu_lines) * 8];
    values[i] = a ^ b ^ k0;
    status[i] = static_cast<uint8_t>(1 + (a & 1));
    atomicAdd(&counters->found, 1ull);
  }
  if (!counters_out) return;
  // The last block to finish publishes the counters and resets them for the next call.
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&counters->blocks_done, 1ull) == gridDim.x - 1;
  __syncthreads();
  if (!last || threadIdx.x != 0) return;
  __threadfence();
  const volatile Counters* v = counters;
  *counters_out = Counters{v->found, v->missing, 0, 0};
  *counters = Counters{};
  if (flag) {
    __threadfence_system();
    *flag = flag_value;
  }
}

int main(int argc, char** argv) {
  size_t region_mib = 1024, calls = 2000;
  std::vector<int> sizes = {16, 64, 256, 1024, 4096};
  for (int a = 1; a + 1 < argc; a += 2) {
    const std::string k = argv[a];
    if (k == "--region-mib") region_mib = std::strtoull(argv[a + 1], nullptr, 10);
    else if (k == "--calls") calls = std::strtoull(argv[a + 1], nullptr, 10);
  }
  const size_t region = region_mib << 20, lines = region / 64;
  void* host = mmap(nullptr, region, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (host == MAP_FAILED) return 1;
  std::memset(host, 1, region);
  CHECK(cudaHostRegister(host, region, cudaHostRegisterMapped));
  uint64_t* table;
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&table), host, 0));
  const size_t gpu_bytes = size_t{1} << 30;
  uint64_t* gpu_table;
  CHECK(cudaMalloc(&gpu_table, gpu_bytes));
  CHECK(cudaMemset(gpu_table, 2, gpu_bytes));

  const size_t io_bytes = size_t{1} << 20;
  uint8_t *pinned, *dev_io;
  CHECK(cudaHostAlloc(&pinned, io_bytes, cudaHostAllocMapped));
  CHECK(cudaMalloc(&dev_io, io_bytes));
  Counters* dev_counters;
  CHECK(cudaMalloc(&dev_counters, sizeof(Counters)));
  CHECK(cudaMemset(dev_counters, 0, sizeof(Counters)));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  std::vector<uint64_t> keys(size_t{4096} * kKeyWords);
  uint64_t seed = 88172645463325252ull;
  std::printf("round trip of a small batch, wall us per call (median / p99), %zu calls, host region %zu MiB\n", calls,
              region_mib);
  std::printf("%-8s %6s %16s %16s %16s\n", "", "ops", "staged", "mapped", "flag");
  for (const int n : sizes) {
    const size_t key_bytes = size_t(n) * kKeyWords * 8, status_bytes = (n + 15) / 16 * 16;
    std::vector<double> us[3];
    for (int variant = 0; variant < 3; ++variant) us[variant].reserve(calls);
    unsigned flag_value = 0;
    for (size_t call = 0; call < calls + 100; ++call) {
      for (uint64_t& k : keys) k = seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      for (int variant = 0; variant < 3; ++variant) {
        const auto t0 = std::chrono::steady_clock::now();
        // pinned layout: [keys][counters][statuses][values]
        std::memcpy(pinned, keys.data(), key_bytes);
        uint8_t* out = pinned + key_bytes + sizeof(Counters);
        const int blocks = (n + 127) / 128;
        if (variant == 0) {
          // As Table::execute: the counters' initial values ride in with the keys, out with the results.
          CHECK(cudaMemcpyAsync(dev_io, pinned, key_bytes + sizeof(Counters), cudaMemcpyHostToDevice, stream));
          uint8_t* dev_out = dev_io + key_bytes + sizeof(Counters);
          round_kernel<<<blocks, 128, 0, stream>>>(reinterpret_cast<uint64_t*>(dev_io), n, table, lines, gpu_table,
                                                   gpu_bytes / 64, dev_out, reinterpret_cast<uint64_t*>(dev_out + status_bytes),
                                                   reinterpret_cast<Counters*>(dev_io + key_bytes), nullptr, nullptr, 0);
          CHECK(cudaMemcpyAsync(pinned + key_bytes, dev_io + key_bytes, sizeof(Counters) + status_bytes + n * 8,
                                cudaMemcpyDeviceToHost, stream));
          CHECK(cudaStreamSynchronize(stream));
        } else {
          volatile unsigned* flag = reinterpret_cast<volatile unsigned*>(pinned + io_bytes - 64);
          uint8_t* dev_pinned;
          CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_pinned), pinned, 0));
          const unsigned want = ++flag_value;
          round_kernel<<<blocks, 128, 0, stream>>>(
              reinterpret_cast<uint64_t*>(dev_pinned), n, table, lines, gpu_table, gpu_bytes / 64,
              dev_pinned + key_bytes + sizeof(Counters),
              reinterpret_cast<uint64_t*>(dev_pinned + key_bytes + sizeof(Counters) + status_bytes), dev_counters,
              reinterpret_cast<Counters*>(dev_pinned + key_bytes),
              variant == 2 ? reinterpret_cast<volatile unsigned*>(dev_pinned + io_bytes - 64) : nullptr, want);
          CHECK(cudaGetLastError());
          if (variant == 1) {
            CHECK(cudaStreamSynchronize(stream));
          } else {
            for (unsigned spins = 0; *flag != want; ++spins)
              if ((spins & 1023) == 1023 && cudaStreamQuery(stream) != cudaErrorNotReady) break;
          }
        }
        const double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        const Counters* c = reinterpret_cast<const Counters*>(pinned + key_bytes);
        if (c->found != static_cast<unsigned long long>(n)) {
          std::fprintf(stderr, "variant %d: %llu found of %d\n", variant, c->found, n);
          return 1;
        }
        const uint8_t* st = out;
        for (int i = 0; i < n; ++i)
          if (st[i] != 1 && st[i] != 2) {
            std::fprintf(stderr, "variant %d: status %d at %d\n", variant, st[i], i);
            return 1;
          }
        std::memset(pinned + key_bytes, 0, sizeof(Counters) + status_bytes);
        if (call >= 100) us[variant].push_back(t);
      }
    }
    std::printf("%-8s %6d", "", n);
    for (auto& v : us) {
      std::sort(v.begin(), v.end());
      std::printf("   %6.1f / %6.1f", v[v.size() / 2], v[v.size() * 99 / 100]);
    }
    std::printf("\n");
  }
  CHECK(cudaStreamSynchronize(stream));
  return 0;
}

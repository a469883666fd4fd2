#include "gpu_test_kernels.h"

#include "gphash/gpu/table_ref.cuh"

namespace gphash::testing {
namespace {

using Ref = gpu::TableRef<gpu::Shape2L2H8S, 8>;

__device__ uint64_t clock_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void apply_kernel(Ref ref, const uint8_t* ops, const uint64_t* keys, const uint64_t* values, uint64_t* out,
                             uint8_t* status, size_t n) {
  const size_t warp = (size_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  if (warp >= n) return;  // whole warps leave together
  uint64_t key = keys[warp];
  const OpStatus s = ref.apply(static_cast<Op>(ops[warp]), &key, reinterpret_cast<const std::byte*>(values + warp),
                               reinterpret_cast<std::byte*>(out + warp));
  if ((threadIdx.x & 31) == 0) status[warp] = static_cast<uint8_t>(s);
}

__global__ void upsert_one_key_kernel(Ref ref, uint64_t key, int rounds) {
  const uint64_t value = (size_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32 + 1;
  for (int r = 0; r < rounds; ++r) ref.upsert(&key, reinterpret_cast<const std::byte*>(&value));
}

__global__ void copy_late_kernel(uint64_t* dst, const uint64_t* src, size_t n, uint64_t delay_ns) {
  const uint64_t until = clock_ns() + delay_ns;
  while (clock_ns() < until) __nanosleep(1000);
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) dst[i] = src[i];
}

}  // namespace

void copy_late_on_stream_zero(uint64_t* dst, const uint64_t* src, size_t n, uint64_t delay_ns) {
  copy_late_kernel<<<1, 256, 0, cudaStreamLegacy>>>(dst, src, n, delay_ns);
}

void session_apply(const DeviceSession& session, cudaStream_t stream, const uint8_t* ops, const uint64_t* keys,
                   const uint64_t* values, uint64_t* out, uint8_t* status, size_t n) {
  const Ref ref = session.ref<Ref>();
  apply_kernel<<<static_cast<unsigned>((n * 32 + 255) / 256), 256, 0, stream>>>(ref, ops, keys, values, out, status, n);
}

void session_upsert_one_key(const DeviceSession& session, cudaStream_t stream, uint64_t key, int warps, int rounds) {
  const Ref ref = session.ref<Ref>();
  upsert_one_key_kernel<<<static_cast<unsigned>((warps * 32 + 255) / 256), 256, 0, stream>>>(ref, key, rounds);
}

}  // namespace gphash::testing

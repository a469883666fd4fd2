// A user's CUDA kernel working on a gphash table through a device session: each warp inserts one
// key and then looks another one up, with the same persist protocol and meaning as a batch.
//
//   build/examples/device_session [POOL]      (default: a pool in /dev/shm, removed afterwards)
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gphash/gpu/table_ref.cuh"
#include "gphash/table.h"

using Ref = gphash::gpu::TableRef<gphash::gpu::Shape2L2H8S, 8>;

// One warp per key: insert key i with value i * 10, then find key i - 1 (inserted by another warp
// of this kernel, or not yet).
__global__ void insert_then_find(Ref table, int n, int* inserted, int* found) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (warp >= n) return;
  uint64_t key = warp + 1, value = key * 10;
  const gphash::OpStatus s = table.insert(&key, reinterpret_cast<const std::byte*>(&value));
  uint64_t other = key > 1 ? key - 1 : key, out = 0;
  const gphash::OpStatus f = table.find(&other, reinterpret_cast<std::byte*>(&out));
  if ((threadIdx.x & 31) == 0) {
    if (s == gphash::OpStatus::kOk) atomicAdd(inserted, 1);
    if (f == gphash::OpStatus::kOk && out == other * 10) atomicAdd(found, 1);
  }
}

int main(int argc, char** argv) {
  const std::string pool = argc > 1 ? argv[1] : "gphash-example-session";
  const int n = 100000;
  try {
    gphash::OpenOptions gpu;
    gpu.engine = gphash::EngineKind::kGpu;
    gpu.replace = true;
    gphash::Table table = gphash::Table::create(pool, {.key_width = 8, .value_width = 8, .capacity = 1 << 18}, gpu);
    cudaStream_t stream;
    cudaStreamCreate(&stream);
    int* counts;
    cudaMalloc(&counts, 2 * sizeof(int));
    cudaMemsetAsync(counts, 0, 2 * sizeof(int), stream);

    gphash::DeviceSession session = table.begin_device_session(stream, {.max_new_items = n});
    insert_then_find<<<(n * 32 + 255) / 256, 256, 0, stream>>>(session.ref<Ref>(), n, counts, counts + 1);
    gphash::BatchEvent done = table.end_device_session(stream);
    done.wait();  // the inserts are durable now

    int host[2];
    cudaMemcpy(host, counts, sizeof host, cudaMemcpyDeviceToHost);
    std::printf("inserted %d of %d keys from a kernel; %d warps found their neighbour's key; the table has %llu items\n",
                host[0], n, host[1], static_cast<unsigned long long>(table.size()));
    table.close();
    const gphash::CheckResult check = gphash::Table::check_pool(pool);
    std::printf("check: %s\n", check.ok ? "ok" : check.violation.c_str());
    cudaFree(counts);
    cudaStreamDestroy(stream);
    if (argc <= 1) std::remove(("/dev/shm/" + pool).c_str());
    return host[0] == n && check.ok ? 0 : 1;
  } catch (const gphash::Error& e) {
    std::fprintf(stderr, "device_session: %s\n", e.what());
    return 1;
  }
}

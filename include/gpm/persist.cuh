// libGPM's persistence primitives for kernels (the GPM model, DESIGN.md section 3; the GPM paper's
// gpm_persist, section 5.1), and the device write path every GPM store goes through.
//
//   gpm::persist_barrier()   stores this thread made before it reach the persistence domain (host
//                            memory: the pool) before any store it makes after it. A system-scope
//                            fence; on persistent memory with DDIO off or eADR it is the persist
//                            barrier, on /dev/shm it makes the stores survive the process.
//   gpm::barrier(persistent) the same for pool memory, and a device-scope fence for data kept in
//                            GPU memory (volatile, so only ordering matters).
//   gpm::DeviceWrites        stores, loads and the barrier of GPM code (logs, checkpoints,
//                            workloads); in crash-point builds it counts stores and traps after the
//                            N-th (GPHASH_GPM_CRASH_AFTER=N), as the index's PoolWrites does.
//
// The host side of "drain" is gpm::drain() (gpm/gpm.h): wait for the stream, then the pool's sync().
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gphash::gpm {

// Host code (gpm/device.h) sees the types only; the device functions exist under nvcc.
#if defined(__CUDACC__)
__device__ __forceinline__ void persist_barrier() { __threadfence_system(); }

__device__ __forceinline__ void barrier(bool persistent) {
  if (persistent)
    __threadfence_system();
  else
    __threadfence();
}
#endif

// Crash injection (crash-point builds only): the store that makes `stores` reach `trap_at` traps.
struct StoreCountdown {
  unsigned long long stores;
  unsigned long long trap_at;  // 0 = off
};

struct DeviceWrites {
  bool persistent = true;
#if GPHASH_CRASH_POINTS
  StoreCountdown* countdown = nullptr;  // in GPU memory, or null
#endif

#if defined(__CUDACC__)
  __device__ __forceinline__ void count() const {
#if GPHASH_CRASH_POINTS
    if (countdown && countdown->trap_at && atomicAdd(&countdown->stores, 1ull) + 1 >= countdown->trap_at) __trap();
#endif
  }
  __device__ __forceinline__ void store(uint64_t* p, uint64_t v) const {
    count();
    *reinterpret_cast<volatile uint64_t*>(p) = v;
  }
  __device__ __forceinline__ uint64_t load(const uint64_t* p) const { return *reinterpret_cast<const volatile uint64_t*>(p); }
  __device__ __forceinline__ void barrier() const { gpm::barrier(persistent); }
#endif
};

}  // namespace gphash::gpm

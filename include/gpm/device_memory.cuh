// The memory policy of gpm/transaction.h for kernels: stores, loads and the persist barrier through
// gpm::DeviceWrites (counted in crash-point builds), and the conventional log's append counters as
// atomics in GPU memory.
#pragma once

#include "gpm/persist.cuh"
#include "gpm/transaction.h"

namespace gphash::gpm {

struct DeviceMemory {
  DeviceWrites w;
  __device__ __forceinline__ void store(uint64_t* p, uint64_t v) const { w.store(p, v); }
  __device__ __forceinline__ uint64_t load(const uint64_t* p) const { return w.load(p); }
  __device__ __forceinline__ void barrier() const { w.barrier(); }
  __device__ __forceinline__ unsigned long long reserve(unsigned long long* counter, uint32_t n) const {
    return atomicAdd(counter, static_cast<unsigned long long>(n));
  }
};

}  // namespace gphash::gpm

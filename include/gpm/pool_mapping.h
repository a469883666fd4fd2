// libGPM's mapping of pool memory for kernels (the GPM layer, DESIGN.md section 7): extents of a
// pool registered with CUDA, so kernels read and write them in place over PCIe (the pool is the
// persistence domain, DESIGN.md section 3). Pools in /dev/shm, hugetlbfs, memfd (anonymous) memory
// or on device-DAX map; regular files do not (kNotMappable). One owner for every registration;
// they are released when it is destroyed, also when an open fails half way. Used by the GPU engine
// (the index) and by gpm::GpmPool (regions, logs, checkpoint groups): one mapping path for both.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "gphash/error.h"
#include "pool/pool.h"

namespace gphash::gpm {

// A failed CUDA call as a typed error (kCuda). The GPU engine has its own checker (cuda_util.h,
// with fault injection); this layer sits below it and needs only this.
inline void mapping_check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  throw Error(ErrorCode::kCuda, std::string("CUDA: ") + what + " failed: " + cudaGetErrorString(err));
}

class PoolMapping {
 public:
  explicit PoolMapping(pool::Pool& pool) : pool_(pool) {}
  ~PoolMapping() {
    for (auto& [offset, bytes] : registered_) cudaHostUnregister(pool_.base() + offset);
  }
  PoolMapping(const PoolMapping&) = delete;
  PoolMapping& operator=(const PoolMapping&) = delete;

  // Registers [offset, offset + bytes) of the pool and returns its device address.
  std::byte* map(uint64_t offset, uint64_t bytes) {
    void* host = pool_.base() + offset;
    unsigned flags = cudaHostRegisterMapped | cudaHostRegisterPortable;
    if (pool_.read_only()) flags |= cudaHostRegisterReadOnly;
    const cudaError_t err = cudaHostRegister(host, bytes, flags);
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw Error(ErrorCode::kNotMappable,
                  "the GPU cannot map pool " + pool_.path() + " (cudaHostRegister: " + cudaGetErrorString(err) +
                      "). The GPU maps pools in /dev/shm, hugetlbfs, device-DAX or anonymous memory: move the pool "
                      "there or use the CPU engine");
    }
    registered_[offset] = bytes;
    void* device = nullptr;
    mapping_check(cudaHostGetDevicePointer(&device, host, 0), "cudaHostGetDevicePointer");
    same_addresses_ &= device == host;
    return static_cast<std::byte*>(device);
  }
  void unmap(uint64_t offset) {
    if (registered_.erase(offset)) mapping_check(cudaHostUnregister(pool_.base() + offset), "cudaHostUnregister");
  }
  // Whether device addresses equal host addresses for every extent (on 64-bit Linux with unified
  // addressing they do); the index's dirty-page marks and GPM's log entries compute pool offsets
  // from them.
  bool same_addresses() const { return same_addresses_; }

 private:
  pool::Pool& pool_;
  std::map<uint64_t, uint64_t> registered_;  // pool offset -> bytes
  bool same_addresses_ = true;
};

}  // namespace gphash::gpm

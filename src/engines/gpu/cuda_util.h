// Host-side CUDA helpers: every runtime call is checked and a failure becomes a gphash::Error.
// (Messages are built without fmt: nvcc cannot evaluate its compile-time format checks.)
#pragma once

#include <cuda_runtime.h>
#include <cstddef>
#include <string>
#include <utility>

#include "gphash/error.h"

namespace gphash::engine::gpu {

inline void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw Error(ErrorCode::kIo, std::string("CUDA: ") + what + " failed: " + cudaGetErrorString(err) + " (" +
                                     cudaGetErrorName(err) + ")");
}
#define GPHASH_CUDA(call) ::gphash::engine::gpu::cuda_check((call), #call)

// Device memory owned by one object.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) { resize(count); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    release();
    ptr_ = std::exchange(o.ptr_, nullptr);
    count_ = std::exchange(o.count_, 0);
    return *this;
  }
  // Reallocates (contents are lost) when more than the current capacity is asked for.
  void reserve(size_t count) {
    if (count > count_) resize(count);
  }
  void resize(size_t count) {
    release();
    if (count) GPHASH_CUDA(cudaMalloc(&ptr_, count * sizeof(T)));
    count_ = count;
  }
  void release() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }
  T* get() const { return ptr_; }
  size_t size() const { return count_; }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

}  // namespace gphash::engine::gpu

// Host-side CUDA helpers: every runtime call is checked and a failure becomes a gphash::Error
// (kCuda with CUDA's message; kNoSpace when GPU memory is exhausted), and small RAII owners for
// device memory, pinned memory, streams and events, so nothing leaks when a constructor throws.
// (Messages are built without fmt: nvcc cannot evaluate its compile-time format checks.)
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <utility>

#include "gphash/error.h"

namespace gphash::engine::gpu {

#if GPHASH_CRASH_POINTS
// Fault injection (crash-test builds only): GPHASH_GPU_FAIL_AT=N makes the N-th checked CUDA call
// of the process fail, as a CUDA error in the middle of a batch would.
inline bool injected_failure() {
  static std::atomic<long> countdown{[] {
    const char* at = std::getenv("GPHASH_GPU_FAIL_AT");
    return at ? std::atol(at) : 0L;
  }()};
  return countdown.load(std::memory_order_relaxed) > 0 && countdown.fetch_sub(1) == 1;
}
#endif

inline void cuda_check(cudaError_t err, const char* what) {
#if GPHASH_CRASH_POINTS
  if (err == cudaSuccess && injected_failure()) err = cudaErrorLaunchFailure;
#endif
  if (err == cudaSuccess) return;
  const std::string message = std::string("CUDA: ") + what + " failed: " + cudaGetErrorString(err) + " (" +
                              cudaGetErrorName(err) + ")";
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it
    throw Error(ErrorCode::kNoSpace, message + "; GPU memory is full");
  }
  throw Error(ErrorCode::kCuda, message);
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

// Pinned host memory, mapped into the device's address space (device() is its address there).
template <class T>
class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t count = 1) {
    GPHASH_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T), cudaHostAllocMapped));
    GPHASH_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_), ptr_, 0));
  }
  ~PinnedBuffer() { cudaFreeHost(ptr_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  T* get() const { return ptr_; }
  T* device() const { return device_; }

 private:
  T* ptr_ = nullptr;
  T* device_ = nullptr;
};

class Stream {
 public:
  // high_priority: the device's greatest stream priority (blocks of its kernels are dispatched
  // before those of streams of default priority that wait at the same time).
  explicit Stream(bool high_priority = false) {
    int least = 0, greatest = 0;
    if (high_priority) GPHASH_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    GPHASH_CUDA(cudaStreamCreateWithPriority(&s_, cudaStreamNonBlocking, high_priority ? greatest : least));
  }
  ~Stream() {
    cudaStreamSynchronize(s_);
    cudaStreamDestroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  operator cudaStream_t() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  explicit Event(bool timing = true) {
    GPHASH_CUDA(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~Event() { cudaEventDestroy(e_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }
  operator cudaEvent_t() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// Makes `stream` wait for the work already on the current device's legacy default stream (stream
// 0). The engine's streams are non-blocking, so stream 0 does not order them, and a cudaMemcpy from
// pageable memory returns before its DMA has landed: a batch in GPU memory filled that way and run
// by execute() could be read before its arrays are written (tests/gpu_test_util.h: the same race
// between a test's copy and its own kernel). Costs an event record and a wait, a few microseconds.
inline void wait_for_legacy_stream(cudaStream_t stream, cudaEvent_t event) {
  GPHASH_CUDA(cudaEventRecord(event, cudaStreamLegacy));
  GPHASH_CUDA(cudaStreamWaitEvent(stream, event, 0));
}

}  // namespace gphash::engine::gpu

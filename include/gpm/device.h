// libGPM, device side (host code with the CUDA runtime): a GPM pool's objects mapped for kernels
// through gpm::PoolMapping (the one mapping path, shared with the GPU engine), log views for a
// launch, GPU checkpoints of device buffers, and drain.
//
//   gpm::DeviceGpm dev(*gp);                    // throws kNotMappable for file pools
//   auto* table = reinterpret_cast<uint64_t*>(dev.map(gp->region("table")));
//   gpm::LogView log = dev.launch(gp->log("txlog"), stream);  // bumps the epoch, resets counters
//   my_kernel<<<blocks, threads, 0, stream>>>(table, log, dev.writes());
//   gpm::drain(*gp, stream);                    // kernels done, their stores in the pool
//   if (dev.log_full()) ...                     // a conventional partition ran out of room
//
//   gpm::DeviceCheckpoint cp(*gp, dev, gp->group("state"));
//   cp.attach(0, d_weights); cp.attach(1, d_bias);   // in the group's element order
//   cp.checkpoint(stream);  ...  cp.restore(stream);
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "gpm/gpm.h"
#include "gpm/persist.cuh"
#include "gpm/pool_mapping.h"
#include "gpm/transaction.h"

namespace gphash::gpm {

class DeviceGpm {
 public:
  explicit DeviceGpm(GpmPool& gp);
  ~DeviceGpm();
  DeviceGpm(const DeviceGpm&) = delete;
  DeviceGpm& operator=(const DeviceGpm&) = delete;

  // Registers a region (or any object) with CUDA once and returns its device address (equal to
  // its host address: checked, log entries name pool offsets computed from it).
  std::byte* map(uint64_t offset, uint64_t bytes);
  std::byte* map(const Region& r) { return map(r.offset, r.bytes); }
  // Before a launch that commits transactions on `log`: maps it, bumps its epoch, clears its
  // conventional partition counters on `stream`, and returns the view kernels take.
  LogView launch(const LogInfo& log, cudaStream_t stream);
  // Whether a transaction of the last launches found its conventional partition full (it then
  // committed nothing); clears the flag.
  bool log_full();
  // The write path kernels use; in crash-point builds it traps after the N-th store when the
  // environment holds GPHASH_GPM_CRASH_AFTER=N.
  DeviceWrites writes() const { return writes_; }
  GpmPool& gpm() const { return gp_; }

 private:
  GpmPool& gp_;
  PoolMapping mapping_;
  std::map<uint64_t, std::byte*> mapped_;
  std::map<uint64_t, unsigned long long*> tails_;  // per conventional log, in GPU memory
  unsigned int* full_ = nullptr;                    // GPU memory
  DeviceWrites writes_{};
  StoreCountdown* countdown_ = nullptr;             // GPU memory (crash-point builds)
};

// A checkpoint group bound to device buffers (the paper's gpmcp_register / checkpoint / restore).
class DeviceCheckpoint {
 public:
  DeviceCheckpoint(GpmPool& gp, DeviceGpm& dev, const GroupInfo& group);
  // Element e of the group lives at `device` (GPU memory, element_bytes[e] bytes).
  void attach(uint32_t e, void* device);
  // A kernel copies every element into the copy the valid record does not name (stores through
  // the GPM write path, then the persist barrier); after the stream drains, the record naming it
  // is written and persisted. Returns the new checkpoint.
  CheckpointState checkpoint(cudaStream_t stream);
  // Copies the valid checkpoint back into the attached buffers; sequence 0: there was none and
  // nothing was copied.
  CheckpointState restore(cudaStream_t stream);

 private:
  GpmPool& gp_;
  DeviceGpm& dev_;
  GroupInfo group_;
  std::byte* copies_ = nullptr;  // device address of the group's extent
  std::vector<void*> device_;
};

// Waits for everything on `stream` (its kernels' stores are then in the pool: a kernel's end is a
// system-scope point) and makes the pool durable per its persist mode (a store fence; msync for
// file pools, which kernels cannot map anyway).
void drain(GpmPool& gp, cudaStream_t stream);

}  // namespace gphash::gpm

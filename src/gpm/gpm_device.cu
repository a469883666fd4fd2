// libGPM's device side: DeviceGpm (objects mapped for kernels, log launches), DeviceCheckpoint
// (the checkpoint kernel) and drain.
#include <cstdlib>
#include <string>

#include "gphash/error.h"
#include "gpm/device.h"

namespace gphash::gpm {

namespace fg = format::gpm;

namespace {

void check(cudaError_t err, const char* what) { mapping_check(err, what); }

// Copies `words` 8-byte words from GPU memory into the pool through the GPM write path; each
// thread's stores are persisted before the kernel ends (the host then commits the record).
__global__ void checkpoint_copy(uint64_t* dst, const uint64_t* src, uint64_t words, DeviceWrites w) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < words; i += uint64_t{gridDim.x} * blockDim.x)
    w.store(dst + i, src[i]);
  w.barrier();
}

}  // namespace

DeviceGpm::DeviceGpm(GpmPool& gp) : gp_(gp), mapping_(gp.pool()) {
  if (!gp.pool().gpu_mappable())
    throw Error(ErrorCode::kNotMappable,
                "the GPU cannot map pool " + gp.pool().path() +
                    ": put GPM pools in /dev/shm, hugetlbfs, device-DAX or anonymous memory");
  check(cudaMalloc(&full_, sizeof(unsigned)), "cudaMalloc");
  check(cudaMemset(full_, 0, sizeof(unsigned)), "cudaMemset");
  writes_.persistent = true;
#if GPHASH_CRASH_POINTS
  check(cudaMalloc(&countdown_, sizeof(StoreCountdown)), "cudaMalloc");
  StoreCountdown c{0, 0};
  if (const char* at = std::getenv("GPHASH_GPM_CRASH_AFTER")) c.trap_at = std::strtoull(at, nullptr, 10);
  check(cudaMemcpy(countdown_, &c, sizeof c, cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // a copy from pageable memory may still be in flight
  writes_.countdown = countdown_;
#endif
}

DeviceGpm::~DeviceGpm() {
  for (auto& [offset, tails] : tails_) cudaFree(tails);
  cudaFree(full_);
  if (countdown_) cudaFree(countdown_);
}

std::byte* DeviceGpm::map(uint64_t offset, uint64_t bytes) {
  if (auto it = mapped_.find(offset); it != mapped_.end()) return it->second;
  std::byte* device = mapping_.map(offset, bytes);
  if (!mapping_.same_addresses())
    throw Error(ErrorCode::kNotMappable, "the GPU maps pool " + gp_.pool().path() +
                                             " at other addresses than the host: GPM needs unified addressing (64-bit Linux)");
  mapped_[offset] = device;
  return device;
}

LogView DeviceGpm::launch(const LogInfo& log, cudaStream_t stream) {
  const fg::LogHeader& h = log.header;
  std::byte* base = map(log.offset, log.bytes);
  LogView v{};
  v.state = reinterpret_cast<uint64_t*>(base + h.state_offset);
  v.entries = reinterpret_cast<uint64_t*>(base + h.entries_offset);
  v.pool_base = reinterpret_cast<uintptr_t>(gp_.pool().base());
  v.layout = h.layout;
  v.mode = h.mode;
  v.slots = h.slots;
  v.entries_per_slot = h.entries_per_slot;
  v.partition_threads = h.partition_threads;
  v.partition_entries = h.partition_entries;
  v.full = full_;
  if (h.layout == kLayoutConventional) {
    const uint64_t partitions = h.slots / h.partition_threads;
    auto& tails = tails_[log.offset];
    if (!tails) check(cudaMalloc(&tails, partitions * sizeof(unsigned long long)), "cudaMalloc");
    check(cudaMemsetAsync(tails, 0, partitions * sizeof(unsigned long long), stream), "cudaMemsetAsync");
    v.tails = tails;
  }
  // The epoch is persisted before the launch's first entry can be written.
  v.epoch = gp_.begin_launch(log);
  return v;
}

bool DeviceGpm::log_full() {
  unsigned flag = 0;
  check(cudaMemcpy(&flag, full_, sizeof flag, cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (flag) check(cudaMemset(full_, 0, sizeof flag), "cudaMemset");
  return flag != 0;
}

DeviceCheckpoint::DeviceCheckpoint(GpmPool& gp, DeviceGpm& dev, const GroupInfo& group)
    : gp_(gp), dev_(dev), group_(group), device_(group.header.element_count, nullptr) {
  copies_ = dev.map(group.offset, group.bytes);
}

void DeviceCheckpoint::attach(uint32_t e, void* device) {
  if (e >= device_.size())
    throw Error(ErrorCode::kInvalidArgument, "group \"" + group_.name + "\" has no element " + std::to_string(e), "element");
  device_[e] = device;
}

CheckpointState DeviceCheckpoint::checkpoint(cudaStream_t stream) {
  for (size_t e = 0; e < device_.size(); ++e)
    if (!device_[e])
      throw Error(ErrorCode::kInvalidArgument,
                  "group \"" + group_.name + "\": element " + std::to_string(e) + " has no device buffer attached", "element");
  const CheckpointState valid = gp_.valid_checkpoint(group_);
  const uint32_t copy = valid.sequence == 0 ? 0 : 1 - valid.copy;
  for (uint32_t e = 0; e < device_.size(); ++e) {
    const uint64_t bytes = group_.header.element_bytes[e];
    auto* dst = reinterpret_cast<uint64_t*>(copies_ + group_.header.copy_offset[copy] + fg::element_offset(group_.header, e));
    const uint64_t words = bytes / 8;
    if (words) checkpoint_copy<<<static_cast<unsigned>(std::min<uint64_t>((words + 255) / 256, 1024)), 256, 0, stream>>>(
        dst, static_cast<const uint64_t*>(device_[e]), words, dev_.writes());
    check(cudaGetLastError(), "checkpoint kernel launch");
    if (bytes % 8)  // the tail: through the host after the kernel
      check(cudaMemcpyAsync(reinterpret_cast<std::byte*>(dst) + words * 8, static_cast<std::byte*>(device_[e]) + words * 8,
                            bytes % 8, cudaMemcpyDeviceToHost, stream),
            "cudaMemcpyAsync");
  }
  drain(gp_, stream);
  gp_.commit_checkpoint(group_, copy, valid.sequence + 1);
  return {valid.sequence + 1, copy};
}

CheckpointState DeviceCheckpoint::restore(cudaStream_t stream) {
  const CheckpointState valid = gp_.valid_checkpoint(group_);
  if (valid.sequence == 0) return valid;
  for (uint32_t e = 0; e < device_.size(); ++e) {
    if (!device_[e]) continue;
    check(cudaMemcpyAsync(device_[e], gp_.element(group_, valid.copy, e), group_.header.element_bytes[e],
                          cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync");
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return valid;
}

void drain(GpmPool& gp, cudaStream_t stream) {
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  gp.pool().sync();
}

}  // namespace gphash::gpm

// Routing a batch in GPU memory to the shards of a sharded table (src/table/shard_set.h), on the
// GPU that holds it: no host round trip for the keys. route() groups the entries by shard
// (format::shard_of), each shard's entries in batch order, into staged arrays on the same GPU;
// the shards run their contiguous parts (peer copies to other GPUs); scatter() writes statuses
// and read values back to the batch's own arrays in batch order.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engines/gpu/cuda_util.h"
#include "gphash/ops.h"

namespace gphash::engine::gpu {

// Where each shard's entries are in the staged arrays, and what they need moved.
struct Routes {
  std::vector<size_t> begin;          // shard k's entries are [begin[k], begin[k+1]); shards + 1 offsets
  std::vector<size_t> value_inputs;   // entries of shard k that read `values` (insert, upsert, update)
  std::vector<size_t> searches;       // entries of shard k that may write `values_out`
};

class DeviceRouter {
 public:
  // Enqueues the routing of `b` (its arrays in GPU memory on the current device) for `shards`
  // shards on `stream` and waits for it. Needs b.size < 2^32.
  Routes route(const Batch& b, uint32_t shards, cudaStream_t stream);
  // Enqueues the scatter of the staged statuses (and, when b.values_out, values) to b's arrays.
  void scatter(const Batch& b, cudaStream_t stream);

  // The staged arrays, grouped by shard (valid after route(); sized for the last batch routed).
  std::byte* keys() const { return keys_.get(); }
  std::byte* values() const { return values_.get(); }
  Op* ops() const { return ops_.get(); }
  OpStatus* status() const { return status_.get(); }
  std::byte* values_out() const { return out_.get(); }

 private:
  DeviceBuffer<uint32_t> shard_, shard_sorted_, index_, order_, counts_;
  DeviceBuffer<std::byte> sort_scratch_, keys_, values_, out_;
  DeviceBuffer<Op> ops_;
  DeviceBuffer<OpStatus> status_;
};

}  // namespace gphash::engine::gpu

// The plan's sort. cub's onesweep radix sort tiles 32-bit pairs by 384 threads x 23 items on
// sm_90: a batch of 2^16 is 8 tiles, so each of its four passes runs on 8 blocks and is bound by
// their latency (ncu, H200, YCSB B at 2^16 host-mapped: 4 x 10.8 us of a 49 us sort, in a 210 us
// batch; bench/results/2026-11-30-direct-gets-and-plan-sort). Small batches on a host-mapped
// table take smaller tiles, so more blocks share each pass: there the plan fell from 61-73 to
// 49-56 us a 2^16 batch (each pass 10.8 -> 7.9 us), B rose 5-7% and C 13-25%. On a table in GPU
// memory no gain showed beyond the runs' spread (LOAD at 2^16 even measured lower, though cub's own
// runs spread as wide), so it keeps cub's tiles (H200; bench/results/2026-11-30-sort-tiles).
#include <cub/device/device_radix_sort.cuh>

#include "engines/gpu/cuda_util.h"
#include "engines/gpu/plan_sort.h"

namespace gphash::engine::gpu {
namespace {

using Offset = uint32_t;  // what cub picks for an int item count
using DefaultHub = cub::detail::radix::policy_hub<uint32_t, uint32_t, Offset>;

// cub's sm_90 policy but for the onesweep tile.
template <int Threads, int Items>
struct SmallTileHub {
  struct Policy900 : cub::ChainedPolicy<900, Policy900, Policy900> {
    using Default = DefaultHub::Policy900;
    static constexpr bool ONESWEEP = true;
    static constexpr int ONESWEEP_RADIX_BITS = 8;
    using HistogramPolicy = typename Default::HistogramPolicy;
    using ExclusiveSumPolicy = typename Default::ExclusiveSumPolicy;
    using OnesweepPolicy =
        cub::AgentRadixSortOnesweepPolicy<Threads, Items, uint32_t, 1, cub::RADIX_RANK_MATCH_EARLY_COUNTS_ANY,
                                          cub::BLOCK_SCAN_RAKING_MEMOIZE, cub::RADIX_SORT_STORE_DIRECT, ONESWEEP_RADIX_BITS>;
    using ScanPolicy = typename Default::ScanPolicy;
    using DownsweepPolicy = typename Default::DownsweepPolicy;
    using AltDownsweepPolicy = typename Default::AltDownsweepPolicy;
    using UpsweepPolicy = typename Default::UpsweepPolicy;
    using AltUpsweepPolicy = typename Default::AltUpsweepPolicy;
    using SingleTilePolicy = typename Default::SingleTilePolicy;
    using SegmentedPolicy = typename Default::SegmentedPolicy;
    using AltSegmentedPolicy = typename Default::AltSegmentedPolicy;
  };
  using MaxPolicy = Policy900;
};

template <class Hub>
cudaError_t sort_with(void* temp, size_t& temp_bytes, const uint32_t* keys_in, uint32_t* keys_out, const uint32_t* values_in,
                      uint32_t* values_out, size_t n, cudaStream_t stream) {
  // As cub::DeviceRadixSort::SortPairs: the inputs are not written (no overwrite).
  cub::DoubleBuffer<uint32_t> keys(const_cast<uint32_t*>(keys_in), keys_out);
  cub::DoubleBuffer<uint32_t> values(const_cast<uint32_t*>(values_in), values_out);
  return cub::DispatchRadixSort<cub::SortOrder::Ascending, uint32_t, uint32_t, Offset, cub::detail::identity_decomposer_t,
                                Hub>::Dispatch(temp, temp_bytes, keys, values, static_cast<Offset>(n), 0, 32, false, stream);
}

}  // namespace

void plan_sort_pairs(void* temp, size_t& temp_bytes, const uint32_t* keys_in, uint32_t* keys_out, const uint32_t* values_in,
                     uint32_t* values_out, size_t n, bool small_tiles, cudaStream_t stream) {
  // 256 x 4: a 2^16 batch's passes on 64 blocks. 512 x 2, 512 x 4 and 256 x 8 measured alike,
  // 128 x 8 and 256 x 2 slower (H200, YCSB at 2^16 host-mapped).
  const cudaError_t err =
      small_tiles && n <= kSmallTilesMax
          ? sort_with<SmallTileHub<256, 4>>(temp, temp_bytes, keys_in, keys_out, values_in, values_out, n, stream)
          : cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, values_in, values_out, static_cast<int>(n), 0, 32,
                                            stream);
  GPHASH_CUDA(err);
}

}  // namespace gphash::engine::gpu

// The plan's radix sort of (hash prefix, operation index) pairs. Plain C++ so tests can call it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace gphash::engine::gpu {

// Batches up to this size sort on small tiles when asked to (plan_sort.cu says why).
inline constexpr size_t kSmallTilesMax = size_t{1} << 17;

// Sorts n pairs by key, stable, from keys_in/values_in into keys_out/values_out, as
// cub::DeviceRadixSort::SortPairs does (temp == nullptr: sets temp_bytes only; pass the same n
// and small_tiles both times). Capturable.
void plan_sort_pairs(void* temp, size_t& temp_bytes, const uint32_t* keys_in, uint32_t* keys_out, const uint32_t* values_in,
                     uint32_t* values_out, size_t n, bool small_tiles, cudaStream_t stream);

}  // namespace gphash::engine::gpu

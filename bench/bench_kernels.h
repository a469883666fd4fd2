// Device helpers for the GPU benchmark (kernels live in bench_kernels.cu).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gphash::bench {

// words[i] = a bijective mix of (seed, first + i), never a reserved 8-byte key: distinct
// indices give distinct keys.
void fill_keys(uint64_t* device_words, size_t count, uint64_t seed, uint64_t first);

// The platform's ceiling for a pattern of host-memory accesses: every "operation" makes the
// listed random accesses (reads, then writes; a system fence after write w if bit w of
// fence_after is set) in a registered host buffer of `bytes` bytes. Returns operations per
// second (best of 3 runs).
struct HostAccessPattern {
  uint32_t reads[4] = {0, 0, 0, 0};  // sizes in bytes (0 = none), each aligned to its size
  uint32_t writes[4] = {0, 0, 0, 0};
  uint32_t fence_after = 0;
};
double host_access_ceiling(void* host_buffer, size_t bytes, const HostAccessPattern& pattern, size_t operations);

// Random 64-byte reads in a GPU-memory buffer of `bytes` bytes (the HBM reference figure).
double device_random_reads(size_t bytes, uint32_t request_bytes, size_t operations);

}  // namespace gphash::bench

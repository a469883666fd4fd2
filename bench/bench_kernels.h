// Device helpers for the GPU benchmark (kernels live in bench_kernels.cu).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gphash::bench {

// words[i] = a bijective mix of (seed, first + i), never a reserved 8-byte key: distinct
// indices give distinct keys.
void fill_keys(uint64_t* device_words, size_t count, uint64_t seed, uint64_t first);

// The platform's rate for one kind of host request: random `bytes`-byte reads or writes (a
// write followed by a system-scope fence, the persist barrier, if `fence`) at addresses aligned to
// their size in [offset, offset + region) of a registered host buffer. Each request is one
// coalesced access (up to 8 lanes of 16 bytes); a warp makes 32, four per instruction, and
// fences once after them, as the table's kernels do. Returns requests per second, best of 3.
double host_request_rate(void* buffer, size_t offset, size_t region, uint32_t bytes, bool write, bool fence,
                         size_t requests);

// The keys of records: record r's key is words [r*key_words, (r+1)*key_words) of the fill_keys
// sequence. Records first .. first+count-1 in a scrambled order when `scramble_mask` (a power of two
// minus one, at least first+count-1) is set, so that consecutive operations touch unrelated
// records as random requests would.
void fill_record_keys(uint64_t* device_words, size_t count, uint32_t key_words, uint64_t seed, uint64_t first,
                      uint64_t scramble_mask);

// The floor of a small batch's round trip: `bytes` copied from pinned host memory to the GPU, one
// kernel of one block that reads them and writes as many back, a copy out, one wait; with `timed`,
// also the GPU engine's three timing events and two elapsed-time queries. Returns the median of
// `calls` round trips, in seconds.
double small_round_trip_seconds(size_t bytes, int calls, bool timed);

// Random 64-byte reads in a GPU-memory buffer of `bytes` bytes (the HBM reference figure).
double device_random_reads(size_t bytes, uint32_t request_bytes, size_t operations);

}  // namespace gphash::bench

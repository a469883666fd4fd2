// Kernels the GPU tests run through a device session (kernels live in .cu files; GoogleTest does
// not compile under nvcc). 2L-2H-8S tables with 8-byte keys and 8-byte values.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gphash/table.h"

namespace gphash::testing {

// One warp per key: ops[i] applied to keys[i] (values[i] for writes), statuses and found values
// written to status[i] / out[i]. All arrays in GPU memory.
void session_apply(const DeviceSession& session, cudaStream_t stream, const uint8_t* ops, const uint64_t* keys,
                   const uint64_t* values, uint64_t* out, uint8_t* status, size_t n);

// `warps` warps each upsert `key` with value warp + 1, many times over, all at once.
void session_upsert_one_key(const DeviceSession& session, cudaStream_t stream, uint64_t key, int warps, int rounds);

// On the legacy default stream (stream 0): waits about `delay_ns` on the GPU, then copies n words
// from src to dst. Stands for work on stream 0 that fills a batch's arrays late.
void copy_late_on_stream_zero(uint64_t* dst, const uint64_t* src, size_t n, uint64_t delay_ns);

}  // namespace gphash::testing

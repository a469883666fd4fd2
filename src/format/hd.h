// Marks functions usable from host and device code. The format layer is shared by the CPU and
// GPU engines; it holds encoding only, no policy.
#pragma once

#if defined(__CUDACC__)
#define GPHASH_HD __host__ __device__ __forceinline__
#else
#define GPHASH_HD inline
#endif

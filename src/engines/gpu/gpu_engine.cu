#include "engines/gpu/gpu_engine.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "engines/gpu/gpu_shapes.h"
#include "format/header.h"
#include "gphash/error.h"

namespace gphash::engine {

namespace {

template <int L, int H, int S>
std::unique_ptr<Engine> for_key_width(pool::Pool& pool, const OpenOptions& options, uint32_t key_width) {
  switch (key_width) {
    case 8: return gpu::make_gpu_engine_instance<L, H, S, 8>(pool, options);
    case 16: return gpu::make_gpu_engine_instance<L, H, S, 16>(pool, options);
    case 32: return gpu::make_gpu_engine_instance<L, H, S, 32>(pool, options);
  }
  throw Error(ErrorCode::kInvalidArgument, "key width " + std::to_string(key_width) + " is not compiled in");
}

}  // namespace

bool gpu_available(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (why) *why = err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device";
    cudaGetLastError();
    return false;
  }
  return true;
}

std::unique_ptr<Engine> make_gpu_engine(pool::Pool& pool, const OpenOptions& options) {
  std::string why;
  if (!gpu_available(&why))
    throw Error(ErrorCode::kNoGpu, "no usable GPU (" + why + "); the CPU engine works on the same pools: --engine cpu");
  const format::PoolHeader& h = pool.header();
  const format::TableShape shape = format::shape_of(h);
  const uint32_t key_width = h.gphash.key_width;
  if (shape == format::TableShape{2, 2, 8}) return for_key_width<2, 2, 8>(pool, options, key_width);
  if (shape == format::TableShape{4, 2, 4}) return for_key_width<4, 2, 4>(pool, options, key_width);
  if (shape == format::TableShape{1, 4, 8}) return for_key_width<1, 4, 8>(pool, options, key_width);
  throw Error(ErrorCode::kInvalidArgument, "shape " + to_string(shape) + " is not compiled in");
}

}  // namespace gphash::engine

#include "engines/gpu/gpu_engine.h"

#include <cuda_runtime.h>

#include <string>

#include "engines/gpu/gpu_shapes.h"
#include "format/header.h"
#include "gphash/error.h"

namespace gphash::engine {

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
  if (shape == format::TableShape{2, 2, 8}) return gpu::make_gpu_engine_2l2h8s(pool, options, h.gphash.key_width);
  if (shape == format::TableShape{4, 2, 4}) return gpu::make_gpu_engine_4l2h4s(pool, options, h.gphash.key_width);
  if (shape == format::TableShape{1, 4, 8}) return gpu::make_gpu_engine_1l4h8s(pool, options, h.gphash.key_width);
  throw Error(ErrorCode::kInvalidArgument, "shape " + to_string(shape) + " is not compiled in");
}

}  // namespace gphash::engine

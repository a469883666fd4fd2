#include "engines/gpu/gpu_engine_impl.cuh"
#include "engines/gpu/gpu_shapes.h"

namespace gphash::engine::gpu {

std::unique_ptr<Engine> make_gpu_engine_1l4h8s(pool::Pool& pool, const OpenOptions& options, uint32_t key_width) {
  return make_gpu_engine_for<format::Shape<1, 4, 8>>(pool, options, key_width);
}

}  // namespace gphash::engine::gpu

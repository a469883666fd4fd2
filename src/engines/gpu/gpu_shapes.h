// One translation unit per shape (they compile in parallel); gpu_engine.cu dispatches.
#pragma once

#include <cstdint>
#include <memory>

#include "engines/engine.h"
#include "gphash/config.h"
#include "pool/pool.h"

namespace gphash::engine::gpu {

std::unique_ptr<Engine> make_gpu_engine_2l2h8s(pool::Pool& pool, const OpenOptions& options, uint32_t key_width);
std::unique_ptr<Engine> make_gpu_engine_4l2h4s(pool::Pool& pool, const OpenOptions& options, uint32_t key_width);
std::unique_ptr<Engine> make_gpu_engine_1l4h8s(pool::Pool& pool, const OpenOptions& options, uint32_t key_width);

}  // namespace gphash::engine::gpu

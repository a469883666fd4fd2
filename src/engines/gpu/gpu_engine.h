// The GPU engine (GPHash on the GPM model). Plain C++ header: the facade includes it without
// nvcc.
#pragma once

#include <memory>
#include <string>

#include "engines/engine.h"
#include "gphash/config.h"
#include "pool/pool.h"

namespace gphash::engine {

// Opens the GPU engine on a pool. Throws kNoGpu when no GPU is usable and kNotMappable when the
// GPU cannot map the pool's memory (a pool on a regular file system), each saying what to do.
std::unique_ptr<Engine> make_gpu_engine(pool::Pool& pool, const OpenOptions& options);

// Whether a CUDA GPU is usable here; `why` says why not.
bool gpu_available(std::string* why);

}  // namespace gphash::engine

#pragma once

#include <memory>

#include "engines/engine.h"
#include "gphash/config.h"
#include "pool/pool.h"

namespace gphash::engine {

// Opens the CPU engine on a pool: recovery runs here if the pool was not shut down cleanly.
std::unique_ptr<Engine> make_cpu_engine(pool::Pool& pool, const OpenOptions& options);

}  // namespace gphash::engine

#pragma once

#include <memory>

#include "engines/engine.h"
#include "gphash/config.h"
#include "pool/pool.h"

namespace gphash::engine {

// Opens the CPU engine on a pool: recovery runs here if the pool was not shut down cleanly.
std::unique_ptr<Engine> make_cpu_engine(pool::Pool& pool, const OpenOptions& options);

// Runs recovery on a pool without opening an engine (see cpu::recover_pool): `gphash check` on a
// private copy-on-write view, `gphash repair` in place.
void recover_pool(pool::Pool& pool, int threads, bool clear_damaged_move_record);

}  // namespace gphash::engine

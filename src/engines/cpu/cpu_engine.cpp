#include "engines/cpu/cpu_engine.h"

#include "engines/common/dispatch.h"
#include "engines/cpu/cpu_engine_impl.h"

namespace gphash::engine {

std::unique_ptr<Engine> make_cpu_engine(pool::Pool& pool, const OpenOptions& options) {
  const format::PoolHeader& h = pool.header();
  auto engine = dispatch(format::shape_of(h), h.gphash.key_width, [&]<class S, int K>() -> std::unique_ptr<Engine> {
    return std::make_unique<cpu::CpuEngine<S, K>>(pool, options);
  });
  // DirectMemory persists every store it makes through Pool::persist, which marks its pages: the
  // engine's writes are tracked, so snapshots can be incremental (pool/dirty_pages.h).
  pool.dirty_pages().set_engine_tracks_writes(true);
  return engine;
}

void recover_pool(pool::Pool& pool, int threads, bool clear_damaged_move_record) {
  const format::PoolHeader& h = pool.header();
  dispatch(format::shape_of(h), h.gphash.key_width, [&]<class S, int K>() {
    cpu::recover_pool<S, K>(pool, threads, clear_damaged_move_record);
  });
}

}  // namespace gphash::engine

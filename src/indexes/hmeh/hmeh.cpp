#include "indexes/hmeh/hmeh.h"

#include "indexes/hmeh/hmeh_engine.h"

namespace gphash::hmeh {

void initialize(pool::Pool& pool, const TableConfig& config) { IndexMeta::initialize(pool, config); }

EngineOptions engine_options(const OpenOptions& options) {
  EngineOptions o;
  o.threads = options.threads;
  o.auto_resize = options.auto_resize;
  return o;
}

std::unique_ptr<Index> open_engine(pool::Pool& pool, const EngineOptions& options) {
  if (pool.header().hmeh.key_width == 8) return std::make_unique<HmehEngine<8>>(pool, options);
  return std::make_unique<HmehEngine<16>>(pool, options);
}

}  // namespace gphash::hmeh

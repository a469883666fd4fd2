// A build without CUDA: the store runs its CPU paths only.
#include "embedding/gpu_lookup.h"

namespace gphash::embedding {

struct GpuLookup::Impl {};
GpuLookup::~GpuLookup() = default;
void GpuLookup::lookup(const int64_t*, size_t, const int64_t*, size_t, bool, Pooling, void*, CUstream_st*) {}
void GpuLookup::index_changed(const int64_t*, const uint64_t*, size_t, bool) {}
GpuCounters GpuLookup::counters() const { return {}; }
uint64_t GpuLookup::cache_rows() const { return 0; }
bool gpu_lookup_available() { return false; }
std::unique_ptr<GpuLookup> make_gpu_lookup(Table&, std::byte*, size_t, const GpuLookupConfig&) {
  throw Error(ErrorCode::kNoGpu, "this build of gphash has no CUDA", "engine");
}

}  // namespace gphash::embedding

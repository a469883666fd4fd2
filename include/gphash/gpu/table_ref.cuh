// gphash::gpu::TableRef: a table as a user's CUDA kernel sees it (the owner/ref split of
// cuCollections' static_map / static_map_ref). Trivially copyable, non-owning, passed by value to
// kernels; a Table on the GPU engine hands it out for a device session:
//
//   gphash::DeviceSession session = table.begin_device_session(stream, {.max_new_items = n});
//   auto ref = session.ref<gphash::gpu::Shape2L2H8S, 8>();   // throws if the pool differs
//   my_kernel<<<blocks, 256, 0, stream>>>(ref, ...);          // warps call ref.find(...) etc.
//   table.end_device_session(stream).wait();                  // or keep going on the stream
//
// Every operation is warp-cooperative: all 32 lanes of a warp call it together with the same
// key (as with a batch, one warp reads the key's 32 candidate slots at once). Writes follow the
// same persist protocol and the same meaning as a batch's operations, through the table's one
// write path; a write is durable once the session's completion is done.
//
// What may run at the same time (the session enforces the rest):
//   - any number of warps in any number of kernels on the session's stream or streams that wait
//     for it, including many warps writing one key: writers of one key are serialised by a lock
//     per key family (bit locks in GPU memory), so a key never gets two published copies;
//   - no host batch, resize, heap growth or displacement: the Table refuses host batches while
//     a session is open (kInvalidArgument), so the table's layout is frozen for the session;
//   - an insert that finds no free candidate slot returns kTableFull, and one that finds no free
//     heap cell kHeapFull (a session gets max_new_items cells up front): the caller can end the
//     session and run such inserts as a host batch, which grows the table.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "engines/gpu/device_table.cuh"
#include "engines/gpu/warp_ops.cuh"
#include "gphash/ops.h"
#include "gphash/table.h"

namespace gphash::gpu {

using Shape2L2H8S = format::Shape<2, 2, 8>;
using Shape4L2H4S = format::Shape<4, 2, 4>;
using Shape1L4H8S = format::Shape<1, 4, 8>;

template <class ShapeT, int KeyWidth>
struct TableRef {
  using Table = engine::gpu::DeviceTable<ShapeT, KeyWidth>;
  using Shape = ShapeT;
  static constexpr int kKeyWidth = KeyWidth;
  static constexpr int kKeyWords = KeyWidth / 8;

  Table table;
  engine::gpu::BatchContext ctx;
  uint32_t* key_locks;  // one bit per bottom-level bucket family, for writers of one key

  // Looks `key` (kKeyWords words) up; on kOk copies its value to `value_out` (if not null).
  __device__ OpStatus find(const uint64_t* key, std::byte* value_out) const {
    return apply(Op::kSearch, key, nullptr, value_out);
  }
  __device__ bool contains(const uint64_t* key) const { return find(key, nullptr) == OpStatus::kOk; }
  __device__ OpStatus insert(const uint64_t* key, const std::byte* value) const { return apply(Op::kInsert, key, value, nullptr); }
  __device__ OpStatus upsert(const uint64_t* key, const std::byte* value) const { return apply(Op::kUpsert, key, value, nullptr); }
  __device__ OpStatus update(const uint64_t* key, const std::byte* value) const { return apply(Op::kUpdate, key, value, nullptr); }
  __device__ OpStatus erase(const uint64_t* key) const { return apply(Op::kErase, key, nullptr, nullptr); }

  // One operation by the whole warp (all lanes, the same arguments); every lane gets the status.
  __device__ OpStatus apply(Op op, const uint64_t* key, const std::byte* value, std::byte* value_out) const {
    using namespace engine::gpu;
    const int lane = threadIdx.x & 31;
    KeyProbe<Table> p;
    make_probe(table, key, p);
    // The operation runs as a one-entry batch through the engine's own warp code, so a session's
    // writes mean exactly what a batch's do.
    uint8_t status = 0;
    BatchView bv{};
    bv.n = 1;
    bv.uniform_op = static_cast<uint8_t>(op);
    bv.keys = p.key;
    bv.values = value;
    bv.values_out = value_out;
    bv.status = &status;
    bv.value_width = table.value_width;
    const bool writes = op != Op::kSearch;
    const uint64_t family = format::bucket_at(p.hash[0], table.bottom);
    if (writes && lane == 0) lock(family);
    __syncwarp();
    long long delta = 0;
    WarpOps<Access::kMirror, Table> ops{table, ctx, bv, lane, delta};
    const RunResult r = ops.single(p, 0, SlowPathFlags{});
    __syncwarp();
    if (writes && lane == 0) unlock(family);
    if (lane == 0 && delta) atomicAdd(reinterpret_cast<unsigned long long*>(&ctx.counters->item_delta), static_cast<unsigned long long>(delta));
    OpStatus s = static_cast<OpStatus>(__shfl_sync(kFullMask, uint32_t(status), 0));
    if (r == RunResult::kNeedSlot) s = OpStatus::kTableFull;
    if (r == RunResult::kNeedCell) s = OpStatus::kHeapFull;
    return s;
  }

 private:
  __device__ void lock(uint64_t family) const {
    uint32_t* word = key_locks + family / 32;
    const uint32_t bit = 1u << (family % 32);
    unsigned backoff = 32;
    while (atomicOr(word, bit) & bit) {
      __nanosleep(backoff);
      if (backoff < 4096) backoff *= 2;
    }
    __threadfence();
  }
  __device__ void unlock(uint64_t family) const {
    __threadfence();
    atomicAnd(key_locks + family / 32, ~(1u << (family % 32)));
  }
};

}  // namespace gphash::gpu

template <class Ref>
Ref gphash::DeviceSession::ref() const {
  if (!(shape == Ref::Shape::value()) || key_width != Ref::kKeyWidth || bytes.size() != sizeof(Ref))
    throw Error(ErrorCode::kInvalidArgument,
                "this session's table is " + to_string(shape) + " with " + std::to_string(key_width) +
                    "-byte keys; the kernel's TableRef was compiled for " + to_string(Ref::Shape::value()) + " with " +
                    std::to_string(Ref::kKeyWidth) + "-byte keys");
  Ref r;
  std::memcpy(static_cast<void*>(&r), bytes.data(), sizeof r);
  return r;
}

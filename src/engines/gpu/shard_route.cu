#include "engines/gpu/shard_route.h"

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <bit>

#include "format/shard_of.h"

namespace gphash::engine::gpu {

namespace {

constexpr int kThreads = 256;
constexpr uint32_t kMaxShards = 1024;  // as ShardSet allows: a block's histogram fits in shared memory

unsigned blocks_for(size_t work) {
  return static_cast<unsigned>(std::clamp<size_t>((work + kThreads - 1) / kThreads, 1, size_t{1} << 16));
}

// The shard of every entry, its index (the radix sort's payload), and per shard: its entries,
// those that read a value and the searches (counts[0..n), [n..2n), [2n..3n)). `ops` may be null
// (every entry is `op`); an entry that is no Op counts as neither (the engine reports it).
__global__ void shard_kernel(const std::byte* keys, const Op* ops, Op op, size_t size, uint32_t key_width,
                             uint32_t shards, uint32_t* shard, uint32_t* index, uint32_t* counts) {
  __shared__ uint32_t block_counts[3 * kMaxShards];
  for (uint32_t k = threadIdx.x; k < 3 * shards; k += blockDim.x) block_counts[k] = 0;
  __syncthreads();
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < size; i += size_t{gridDim.x} * blockDim.x) {
    const uint32_t s = format::shard_of(keys + i * key_width, key_width, shards);
    shard[i] = s;
    index[i] = static_cast<uint32_t>(i);
    atomicAdd(&block_counts[s], 1u);
    const Op o = ops ? ops[i] : op;
    if (o == Op::kInsert || o == Op::kUpsert || o == Op::kUpdate) atomicAdd(&block_counts[shards + s], 1u);
    else if (o == Op::kSearch) atomicAdd(&block_counts[2 * shards + s], 1u);
  }
  __syncthreads();
  for (uint32_t k = threadIdx.x; k < 3 * shards; k += blockDim.x)
    if (block_counts[k]) atomicAdd(&counts[k], block_counts[k]);
}

// Rows of `words` units: gather moves row order[j] of src to row j of dst; scatter the reverse.
template <class U, bool kGather>
__global__ void move_rows(const U* src, U* dst, const uint32_t* order, size_t rows, uint32_t words) {
  const size_t total = rows * words;
  for (size_t t = blockIdx.x * size_t{blockDim.x} + threadIdx.x; t < total; t += size_t{gridDim.x} * blockDim.x) {
    const size_t j = t / words, w = t % words, routed = size_t{order[j]} * words + w;
    if constexpr (kGather) dst[t] = src[routed];
    else dst[routed] = src[t];
  }
}

template <bool kGather>
void move_rows(const void* src, void* dst, const uint32_t* order, size_t rows, uint32_t width, cudaStream_t stream) {
  // The widest unit that divides the width and both arrays' alignment: coalesced 8-byte moves
  // for keys and the usual values.
  const auto align = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) | width;
  const auto launch = [&]<class U>(U*) {
    const uint32_t words = width / sizeof(U);
    move_rows<U, kGather><<<blocks_for(rows * words), kThreads, 0, stream>>>(static_cast<const U*>(src),
                                                                            static_cast<U*>(dst), order, rows, words);
  };
  if (align % 8 == 0) launch(static_cast<uint64_t*>(nullptr));
  else if (align % 4 == 0) launch(static_cast<uint32_t*>(nullptr));
  else launch(static_cast<uint8_t*>(nullptr));
  GPHASH_CUDA(cudaGetLastError());
}

}  // namespace

Routes DeviceRouter::route(const Batch& b, uint32_t shards, cudaStream_t stream) {
  const size_t n = b.size;
  if (shards == 0 || shards > kMaxShards)
    throw Error(ErrorCode::kInvalidArgument, "a sharded table has 1 to 1024 shards", "shards");
  if (n >= (size_t{1} << 32))
    throw Error(ErrorCode::kInvalidArgument, "a batch in GPU memory on a sharded table has fewer than 2^32 entries",
                "size");
  shard_.reserve(n), shard_sorted_.reserve(n), index_.reserve(n), order_.reserve(n), counts_.reserve(3 * shards);
  keys_.reserve(n * b.key_width), status_.reserve(n);
  if (b.values) values_.reserve(n * b.value_width);
  if (b.values_out) out_.reserve(n * b.value_width);
  if (b.ops) ops_.reserve(n);

  GPHASH_CUDA(cudaMemsetAsync(counts_.get(), 0, 3 * shards * sizeof(uint32_t), stream));
  shard_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const std::byte*>(b.keys), b.ops, b.op, n,
                                                       b.key_width, shards, shard_.get(), index_.get(), counts_.get());
  GPHASH_CUDA(cudaGetLastError());
  // A radix sort on the shard alone is stable: each shard's entries stay in batch order.
  const int bits = std::max(1, static_cast<int>(std::bit_width(shards - 1)));
  size_t scratch = 0;
  GPHASH_CUDA(cub::DeviceRadixSort::SortPairs(nullptr, scratch, shard_.get(), shard_sorted_.get(), index_.get(),
                                              order_.get(), static_cast<int64_t>(n), 0, bits, stream));
  sort_scratch_.reserve(scratch);
  GPHASH_CUDA(cub::DeviceRadixSort::SortPairs(sort_scratch_.get(), scratch, shard_.get(), shard_sorted_.get(),
                                              index_.get(), order_.get(), static_cast<int64_t>(n), 0, bits, stream));
  move_rows<true>(b.keys, keys_.get(), order_.get(), n, b.key_width, stream);
  if (b.values) move_rows<true>(b.values, values_.get(), order_.get(), n, b.value_width, stream);
  if (b.ops) move_rows<true>(b.ops, ops_.get(), order_.get(), n, sizeof(Op), stream);
  std::vector<uint32_t> counts(3 * shards);
  GPHASH_CUDA(cudaMemcpyAsync(counts.data(), counts_.get(), counts.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                              stream));
  GPHASH_CUDA(cudaStreamSynchronize(stream));
  Routes r;
  r.begin.assign(shards + 1, 0);
  for (uint32_t k = 0; k < shards; ++k) {
    r.begin[k + 1] = r.begin[k] + counts[k];
    r.value_inputs.push_back(counts[shards + k]);
    r.searches.push_back(counts[2 * shards + k]);
  }
  return r;
}

void DeviceRouter::scatter(const Batch& b, cudaStream_t stream) {
  move_rows<false>(status_.get(), b.status, order_.get(), b.size, sizeof(OpStatus), stream);
  if (b.values_out) move_rows<false>(out_.get(), b.values_out, order_.get(), b.size, b.value_width, stream);
}

}  // namespace gphash::engine::gpu

#include "snapshot/restore.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "engines/common/crash_point.h"
#include "format/header.h"
#include "format/hmeh/layout.h"
#include "gphash/error.h"
#include "pool/pool.h"
#include "snapshot/snapshot_reader.h"

namespace gphash::snapshot {
namespace {

constexpr uint64_t kNowhere = ~uint64_t{0};
constexpr uint64_t kMaxRunBytes = uint64_t{1} << 20;

// The valid header copy with the higher generation among the two the snapshot holds.
format::PoolHeader restored_header(const pool::Pool& pool, uint64_t pool_bytes, const std::string& path) {
  std::optional<format::PoolHeader> best;
  std::string problem;
  for (uint64_t at : format::kHeaderCopyOffset) {
    const format::PoolHeader h = *pool.at<format::PoolHeader>(at);
    try {
      format::validate_header(h, pool_bytes);
      if (!best || h.generation > best->generation) best = h;
    } catch (const Error& e) {
      problem = e.what();
    }
  }
  if (!best)
    throw Error(ErrorCode::kCorruptFile,
                fmt::format("snapshot file {} is damaged: the pool header it holds is invalid ({})", path, problem),
                "pool_header");
  return *best;
}

// The pool's extents as sorted [begin, end) ranges: the prefix, the attachment, then GPHash's levels and heap
// chunks, or HMEH's segment, radix-node and heap chunks (chunk c of an arena holds first << c
// units), or a GPM pool's objects. Anything else is released, so this must name every extent.
std::vector<std::pair<uint64_t, uint64_t>> live_extents(const format::PoolHeader& h) {
  std::vector<std::pair<uint64_t, uint64_t>> r{{0, format::kReservedPrefixBytes}};
  if (h.attachment_bytes) r.push_back({h.attachment_offset, h.attachment_offset + h.attachment_bytes});
  if (h.index_kind == format::kIndexHmeh) {
    const format::HmehMeta& m = h.hmeh;
    const auto arena = [&](uint32_t chunks, uint64_t first, const uint64_t* offsets, uint64_t unit_bytes) {
      for (uint32_t c = 0; c < chunks; ++c) r.push_back({offsets[c], offsets[c] + (first << c) * unit_bytes});
    };
    arena(m.segment_chunk_count, m.segment_first_chunk, m.segment_chunk_offset, uint64_t{1} << m.segment_bytes_log2);
    arena(m.node_chunk_count, m.node_first_chunk, m.node_chunk_offset, format::hmeh::kNodeBytes);
    arena(m.heap_chunk_count, m.heap_first_chunk_cells, m.heap_chunk_offset, m.cell_size);
    std::sort(r.begin(), r.end());
    return r;
  }
  if (h.index_kind == format::kIndexGpm) {  // GPM pools: every object of the directory
    for (uint32_t i = 0; i < h.gpm.object_count; ++i)
      r.push_back({h.gpm.objects[i].offset, h.gpm.objects[i].offset + h.gpm.objects[i].bytes});
    std::sort(r.begin(), r.end());
    return r;
  }
  for (uint32_t l = h.gphash.bottom_level; l <= format::highest_level(h); ++l)
    r.push_back({h.gphash.level_offset[l], h.gphash.level_offset[l] + format::level_bytes(h, l)});
  const format::HeapGeometry g = format::heap_geometry(h);
  for (uint32_t c = 0; c < h.gphash.heap_chunk_count; ++c)
    r.push_back({h.gphash.heap_chunk_offset[c], h.gphash.heap_chunk_offset[c] + g.chunk_cells(c) * h.gphash.cell_size});
  std::sort(r.begin(), r.end());
  return r;
}

}  // namespace

RestoreResult restore_pool(const std::string& snapshot_path, const std::string& pool_spec, const RestoreOptions& options,
                           FileSystem& fs) {
  const auto t0 = std::chrono::steady_clock::now();
  if (pool::resolve_location(pool_spec).kind == pool::PoolKind::kMemory)
    throw Error(ErrorCode::kInvalidArgument, "restore needs a pool path or name, not anonymous memory", "pool");
  std::unique_ptr<File> file = fs.open_read(snapshot_path);
  const Chain chain = read_chain(*file, snapshot_path);
  const SegmentHeader& last = chain.segments.back().header;
  const uint64_t pages = last.pool_bytes >> kPageShift;
  if (last.pool_bytes < format::kReservedPrefixBytes)
    throw Error(ErrorCode::kCorruptFile,
                fmt::format("snapshot file {} is damaged: its pool has {} bytes", snapshot_path, last.pool_bytes),
                "segment.pool_bytes");

  // Where each page's last version is: a data page's file offset, or nowhere (zero).
  std::vector<uint64_t> where(pages, kNowhere), hash(pages, 0);
  for (const Segment& seg : chain.segments) {
    uint64_t slot = 0;
    for (const PageEntry& e : seg.index) {
      const uint64_t page = e.page & kPageNumberMask;
      if (e.page & kZeroPageFlag) {
        where[page] = kNowhere;
        continue;
      }
      where[page] = seg.data_offset() + slot++ * kPageBytes;
      hash[page] = e.hash;
    }
  }

  RestoreResult result;
  result.segments = chain.segments.size();
  result.pool_bytes = last.pool_bytes;
  result.captured_unix_ns = last.captured_unix_ns;
  result.pool_writes = last.pool_writes;
  pool::CreateOptions create;
  create.replace = options.replace;
  create.file_mode = options.pool_file_mode;
  // Written under a temporary name: a failure below removes it, and the path is untouched.
  std::unique_ptr<pool::Pool> pool = pool::Pool::create(pool_spec, create);
  format::PoolHeader sizing = pool->header();
  if (last.pool_bytes > pool->file_size()) pool->allocate_extent(sizing, last.pool_bytes - format::kReservedPrefixBytes);
  if (pool->file_size() != last.pool_bytes)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("the snapshot's pool of {} bytes does not fit the extent alignment of {}", last.pool_bytes,
                            pool->path()),
                "pool");
  // Runs of pages that are adjacent both in the pool and in the file are read in one call.
  std::byte* base = pool->base();
  for (uint64_t p = 0; p < pages;) {
    if (where[p] == kNowhere) {
      ++p;
      continue;
    }
    uint64_t n = 1;
    while (p + n < pages && n * kPageBytes < kMaxRunBytes && where[p + n] == where[p] + n * kPageBytes) ++n;
    if (file->read_at(where[p], base + p * kPageBytes, n * kPageBytes) != n * kPageBytes)
      throw Error(ErrorCode::kCorruptFile, fmt::format("snapshot file {} is truncated: page {} is missing", snapshot_path, p));
    for (uint64_t i = p; i < p + n; ++i)
      if (page_hash(base + i * kPageBytes, i) != hash[i])
        throw Error(ErrorCode::kCorruptFile,
                    fmt::format("snapshot file {} is damaged: pool page {} (file offset {}) fails its hash", snapshot_path,
                                i, where[i]),
                    "page");
    result.pages_read += n;
    p += n;
  }
  format::PoolHeader h = restored_header(*pool, last.pool_bytes, snapshot_path);
  // What the pool released before the capture (old levels, copies a save replaced) is not part
  // of it; a delta does not list such pages, so clear every whole page outside the extents.
  uint64_t covered = 0;
  for (auto [begin, end] : live_extents(h)) {
    const uint64_t from = round_to_page(covered), to = begin & ~(kPageBytes - 1);
    if (to > from) pool->release_extent(from, to - from);
    covered = std::max(covered, end);
  }
  if (last.pool_bytes > round_to_page(covered)) pool->release_extent(round_to_page(covered), last.pool_bytes - round_to_page(covered));
  h.snapshot_unix_ns = last.captured_unix_ns;
  h.snapshot_writes = last.pool_writes;
  std::memcpy(h.snapshot_chain_id, last.chain_id, 16);  // the pool is that snapshot: deltas go on from it
  pool->write_initial_header(h);  // both copies, synced
  GPHASH_CRASH_POINT("restore.before_publish");
  pool->publish();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace gphash::snapshot

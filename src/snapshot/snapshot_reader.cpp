#include "snapshot/snapshot_reader.h"

#include <fmt/format.h>

#include <cstring>
#include <memory>

#include "gphash/error.h"

namespace gphash::snapshot {
namespace {

[[noreturn]] void corrupt(const std::string& path, const std::string& what, const std::string& field = {}) {
  throw Error(ErrorCode::kCorruptFile, fmt::format("snapshot file {} is damaged: {}", path, what), field);
}

// Whether a copy is whole: ours, a version we read, and its checksum holds. A copy that is not
// is what a torn write leaves, and the other copy stands.
void check_intact(const Superblock& s, const std::string& path) {
  if (std::memcmp(s.magic, kSnapshotMagic, sizeof s.magic) != 0)
    throw Error(ErrorCode::kCorruptFile, fmt::format("not a gphash snapshot file: {} (wrong magic bytes)", path), "magic");
  if (s.byte_order != kByteOrderMark)
    throw Error(ErrorCode::kCorruptFile,
                fmt::format("snapshot file {} was written with another byte order ({:#x})", path, s.byte_order),
                "byte_order");
  if (s.version_major != kVersionMajor)
    throw Error(ErrorCode::kUnsupportedVersion,
                fmt::format("snapshot file {} has format version {}.{}; this build reads version {}.x", path,
                            s.version_major, s.version_minor, kVersionMajor),
                "version_major");
  if (s.checksum != checksum_of(s)) corrupt(path, "superblock checksum mismatch", "checksum");
}

// The fields of a whole copy. A whole copy that fails here is damage, not a torn write.
void check_fields(const Superblock& s, uint64_t file_size, const std::string& path) {
  if (s.page_shift != kPageShift) corrupt(path, fmt::format("page_shift {} (expected {})", s.page_shift, kPageShift), "page_shift");
  if (s.segment_count == 0) corrupt(path, "no segment committed", "segment_count");
  if (s.committed_end < kFirstSegmentOffset + kPageBytes || s.committed_end % kPageBytes != 0)
    corrupt(path, fmt::format("committed_end {} is impossible", s.committed_end), "committed_end");
  if (s.last_segment_offset < kFirstSegmentOffset || s.last_segment_offset >= s.committed_end ||
      s.last_segment_offset % kPageBytes != 0)
    corrupt(path, fmt::format("last_segment_offset {} is outside the committed chain", s.last_segment_offset),
            "last_segment_offset");
  if (s.committed_end > file_size)
    throw Error(ErrorCode::kCorruptFile,
                fmt::format("snapshot file {} is truncated: it has {} bytes, its superblock commits {}", path, file_size,
                            s.committed_end),
                "committed_end");
}

}  // namespace

Superblock read_superblock(File& file, const std::string& path, int* copy) {
  const uint64_t size = file.size();
  if (size < kFirstSegmentOffset) {
    unsigned char magic[8] = {};
    if (size == 0 || file.read_at(0, magic, sizeof magic) != sizeof magic || std::memcmp(magic, kSnapshotMagic, 8) != 0)
      throw Error(ErrorCode::kCorruptFile,
                  fmt::format("not a gphash snapshot file: {} ({})", path, size == 0 ? "empty" : "wrong magic bytes"), "magic");
    throw Error(ErrorCode::kCorruptFile,
                fmt::format("snapshot file {} is truncated: {} bytes, a snapshot file has at least {}", path, size,
                            kFirstSegmentOffset),
                "file_size");
  }
  Superblock s[2];
  bool intact[2] = {false, false};
  std::unique_ptr<Error> errors[2];
  for (int c = 0; c < 2; ++c) {
    if (file.read_at(kSuperblockOffset[c], &s[c], sizeof s[c]) != sizeof s[c]) corrupt(path, "short superblock");
    try {
      check_intact(s[c], path);
      intact[c] = true;
    } catch (const Error& e) {
      errors[c] = std::make_unique<Error>(e);
    }
  }
  if (!intact[0] && !intact[1]) {
    // The copy that got further says more: a wrong magic in one copy says less than a bad field.
    const Error& e = errors[0]->field() == "magic" ? *errors[1] : *errors[0];
    throw Error(e.code(), fmt::format("{} (both superblock copies are unusable)", e.what()), e.field());
  }
  const int pick = intact[0] && (!intact[1] || s[0].generation >= s[1].generation) ? 0 : 1;
  check_fields(s[pick], size, path);
  if (copy) *copy = pick;
  return s[pick];
}

Chain read_chain(File& file, const std::string& path) {
  Chain chain;
  chain.superblock = read_superblock(file, path);
  const Superblock& sb = chain.superblock;
  uint64_t offset = kFirstSegmentOffset, previous_checksum = 0, previous_pool_bytes = 0;
  std::vector<uint64_t> seen;  // a bit per page: no page twice in one segment
  for (uint64_t sequence = 0; sequence < sb.segment_count; ++sequence) {
    const std::string where = fmt::format("segment {} at offset {}", sequence, offset);
    if (offset + kPageBytes > sb.committed_end)
      corrupt(path, fmt::format("{} lies past the committed end {}", where, sb.committed_end), "segment_count");
    Segment seg;
    seg.offset = offset;
    SegmentHeader& h = seg.header;
    if (file.read_at(offset, &h, sizeof h) != sizeof h) corrupt(path, where + ": short header");
    if (std::memcmp(h.magic, kSegmentMagic, sizeof h.magic) != 0) corrupt(path, where + ": wrong segment magic", "segment.magic");
    if (h.checksum != checksum_of(h)) corrupt(path, where + ": header checksum mismatch", "segment.checksum");
    if (std::memcmp(h.chain_id, sb.chain_id, 16) != 0) corrupt(path, where + ": belongs to another chain", "segment.chain_id");
    if (h.sequence != sequence) corrupt(path, fmt::format("{}: sequence {}", where, h.sequence), "segment.sequence");
    if (h.kind != (sequence == 0 ? kSegmentBase : kSegmentDelta))
      corrupt(path, fmt::format("{}: kind {}", where, h.kind), "segment.kind");
    if (h.previous_checksum != previous_checksum) corrupt(path, where + ": does not follow the segment before it", "segment.previous_checksum");
    if (h.pool_bytes % kPageBytes != 0 || h.pool_bytes < previous_pool_bytes || (h.pool_bytes >> kPageShift) > kPageNumberMask)
      corrupt(path, fmt::format("{}: pool_bytes {} (previous {})", where, h.pool_bytes, previous_pool_bytes), "segment.pool_bytes");
    if (h.data_pages > h.entry_count || h.entry_count > (h.pool_bytes >> kPageShift) ||
        h.segment_bytes != segment_bytes_for(h.data_pages, h.entry_count) || offset + h.segment_bytes > sb.committed_end)
      corrupt(path, fmt::format("{}: {} entries, {} data pages, {} bytes do not fit the chain", where, h.entry_count,
                                h.data_pages, h.segment_bytes),
              "segment.segment_bytes");
    seg.index.resize(h.entry_count);
    const uint64_t index_offset = seg.data_offset() + h.data_pages * kPageBytes;
    const size_t index_bytes = static_cast<size_t>(h.entry_count * sizeof(PageEntry));
    if (file.read_at(index_offset, seg.index.data(), index_bytes) != index_bytes) corrupt(path, where + ": short index");
    if (index_checksum(seg.index.data(), h.entry_count) != h.index_checksum)
      corrupt(path, where + ": index checksum mismatch", "segment.index_checksum");
    const uint64_t pages = h.pool_bytes >> kPageShift;
    seen.assign(static_cast<size_t>((pages + 63) / 64), 0);
    uint64_t data = 0;
    for (const PageEntry& e : seg.index) {
      const uint64_t page = e.page & kPageNumberMask;
      const bool zero = (e.page & kZeroPageFlag) != 0;
      if ((e.page & ~(kPageNumberMask | kZeroPageFlag)) != 0 || page >= pages || (zero && e.hash != 0))
        corrupt(path, fmt::format("{}: index entry {:#x} is impossible", where, e.page), "segment.index");
      uint64_t& bits = seen[static_cast<size_t>(page / 64)];
      if (bits & (uint64_t{1} << (page % 64))) corrupt(path, fmt::format("{}: page {} listed twice", where, page), "segment.index");
      bits |= uint64_t{1} << (page % 64);
      data += zero ? 0 : 1;
    }
    if (data != h.data_pages) corrupt(path, fmt::format("{}: {} data entries for {} data pages", where, data, h.data_pages), "segment.index");
    previous_checksum = h.checksum;
    previous_pool_bytes = h.pool_bytes;
    offset += h.segment_bytes;
    chain.segments.push_back(std::move(seg));
  }
  const Segment& last = chain.segments.back();
  if (offset != sb.committed_end || last.offset != sb.last_segment_offset || last.header.checksum != sb.last_segment_checksum)
    corrupt(path, fmt::format("the chain ends at {}, its superblock says {}", offset, sb.committed_end), "committed_end");
  return chain;
}

}  // namespace gphash::snapshot

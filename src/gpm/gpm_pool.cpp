// GpmPool: the directory of a GPM pool (header section, format/gpm/meta.h), creating and finding
// regions, logs and checkpoint groups, log epochs and checkpoint records.
#include <fmt/format.h>

#include <cstring>
#include <functional>

#include "format/header.h"
#include "gphash/error.h"
#include "gpm/gpm.h"

namespace gphash::gpm {

namespace fg = format::gpm;

namespace {

[[noreturn]] void invalid(const std::string& field, const std::string& why) {
  throw Error(ErrorCode::kInvalidArgument, why, field);
}
[[noreturn]] void corrupt_object(const std::string& name, const std::string& why) {
  throw Error(ErrorCode::kCorruptTable, fmt::format("GPM object \"{}\" is damaged: {}", name, why), name);
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

GpmPool::~GpmPool() = default;

std::unique_ptr<GpmPool> GpmPool::create(const std::string& spec, const pool::CreateOptions& options) {
  auto p = pool::Pool::create(spec, options);
  format::PoolHeader h = p->initial_header(format::kIndexGpm);
  p->write_initial_header(h);
  p->publish();
  return std::unique_ptr<GpmPool>(new GpmPool(std::move(p)));
}

std::unique_ptr<GpmPool> GpmPool::open(const std::string& spec, const pool::OpenOptions& options) {
  auto p = pool::Pool::open(spec, options);
  if (p->header().index_kind != format::kIndexGpm)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("pool {} holds a {} index, not GPM objects: open it with gphash::Table", p->path(),
                            p->header().index_kind == format::kIndexHmeh ? "HMEH" : "GPHash"),
                "index_kind");
  std::unique_ptr<GpmPool> g(new GpmPool(std::move(p)));
  // Every log and group header is checked here, before any kernel sees them.
  const format::GpmMeta& m = g->pool_->header().gpm;
  for (uint32_t i = 0; i < m.object_count; ++i) {
    const fg::Object& o = m.objects[i];
    if (o.kind == fg::kObjectLog) {
      const LogInfo log = g->load_log(o);
      if (!g->pool_->read_only()) g->reports_.emplace_back(log.name, g->recover(log));
    } else if (o.kind == fg::kObjectGroup) {
      g->load_group(o);
    }
  }
  return g;
}

const fg::Object& GpmPool::find(const std::string& name, uint32_t kind) const {
  const format::GpmMeta& m = pool_->header().gpm;
  for (uint32_t i = 0; i < m.object_count; ++i)
    if (m.objects[i].kind == kind && name == m.objects[i].name) return m.objects[i];
  static const char* const kinds[] = {"", "region", "log", "checkpoint group"};
  throw Error(ErrorCode::kNotFound, fmt::format("pool {} has no {} named \"{}\"", pool_->path(), kinds[kind], name), name);
}

uint64_t GpmPool::add_object(const std::string& name, uint32_t kind, uint64_t bytes,
                             const std::function<void(std::byte*)>& init) {
  if (name.empty() || name.size() >= fg::kNameBytes)
    invalid("name", fmt::format("object name \"{}\" must have 1..{} bytes", name, fg::kNameBytes - 1));
  format::PoolHeader h = pool_->header();
  format::GpmMeta& m = h.gpm;
  for (uint32_t i = 0; i < m.object_count; ++i)
    if (name == m.objects[i].name)
      throw Error(ErrorCode::kPoolExists, fmt::format("pool {} already has an object named \"{}\"", pool_->path(), name),
                  name);
  if (m.object_count == fg::kMaxObjects)
    throw Error(ErrorCode::kNoSpace, fmt::format("a GPM pool holds at most {} objects", fg::kMaxObjects), "name");
  // The extent is zero-filled; the object exists once the new header naming it is persisted.
  const uint64_t offset = pool_->allocate_extent(h, align_up(bytes, 4096));
  fg::Object& o = m.objects[m.object_count++];
  std::memset(&o, 0, sizeof o);
  std::memcpy(o.name, name.data(), name.size());
  o.kind = kind;
  o.offset = offset;
  o.bytes = align_up(bytes, 4096);
  // The object's own header goes in (and is persisted) before the pool header names the object.
  if (init) init(pool_->base() + offset);
  pool_->write_header(h);
  pool_->sync();
  return offset;
}

Region GpmPool::create_region(const std::string& name, uint64_t bytes) {
  if (bytes == 0) invalid("bytes", "a region needs at least one byte");
  add_object(name, fg::kObjectRegion, bytes, {});
  return region(name);
}

Region GpmPool::region(const std::string& name) const {
  const fg::Object& o = find(name, fg::kObjectRegion);
  return {o.name, o.offset, o.bytes, pool_->base() + o.offset};
}

bool GpmPool::in_region(uint64_t offset) const {
  const format::GpmMeta& m = pool_->header().gpm;
  for (uint32_t i = 0; i < m.object_count; ++i) {
    const fg::Object& o = m.objects[i];
    if (o.kind == fg::kObjectRegion && offset >= o.offset && offset + 8 <= o.offset + o.bytes && offset % 8 == 0)
      return true;
  }
  return false;
}

LogInfo GpmPool::create_log(const std::string& name, const LogOptions& o) {
  fg::LogHeader lh{};
  lh.magic = fg::kLogMagic;
  lh.layout = o.layout;
  lh.mode = o.mode;
  lh.slots = o.slots;
  lh.entries_per_slot = o.entries_per_slot;
  if (o.layout != kLayoutHcl && o.layout != kLayoutConventional) invalid("layout", "layout is neither HCL nor conventional");
  if (o.mode != kModeUndo && o.mode != kModeRedo) invalid("mode", "mode is neither undo nor redo");
  if (o.entries_per_slot == 0 || o.entries_per_slot > fg::kMaxTxEntries)
    invalid("entries_per_slot", fmt::format("entries_per_slot {} is not in 1..{}", o.entries_per_slot, fg::kMaxTxEntries));
  if (o.slots == 0 || o.slots > (uint64_t{1} << 32)) invalid("slots", fmt::format("slots {} is not in 1..2^32", o.slots));
  if (o.layout == kLayoutHcl) {
    if (o.slots % fg::kWarpLanes) invalid("slots", fmt::format("an HCL log's slots ({}) must be whole warps of 32", o.slots));
    lh.partition_threads = fg::kWarpLanes;
    lh.partition_entries = 0;
  } else {
    if (o.partition_threads == 0 || o.partition_threads > fg::kMaxPartitionThreads || o.slots % o.partition_threads)
      invalid("partition_threads", fmt::format("partition_threads {} must be in 1..{} and divide slots {}",
                                               o.partition_threads, fg::kMaxPartitionThreads, o.slots));
    if (o.partition_entries < o.entries_per_slot)
      invalid("partition_entries", fmt::format("partition_entries {} is less than one transaction's {} entries",
                                               o.partition_entries, o.entries_per_slot));
    lh.partition_threads = o.partition_threads;
    lh.partition_entries = o.partition_entries;
  }
  lh.state_offset = fg::kLogHeaderBytes;
  lh.entries_offset = align_up(lh.state_offset + 8 * lh.slots, 4096);
  lh.bytes = lh.entries_offset + fg::log_entry_count(lh) * fg::kEntryBytes;
  lh.checksum = fg::log_header_checksum(lh);
  // The extent is zero: every state word says "nothing yet", every entry fails its check.
  add_object(name, fg::kObjectLog, lh.bytes, [&](std::byte* p) {
    std::memcpy(p, &lh, sizeof lh);
    pool_->persist(p, sizeof lh);
  });
  return log(name);
}

LogInfo GpmPool::load_log(const fg::Object& o) const {
  LogInfo info{o.name, o.offset, o.bytes, {}};
  std::memcpy(&info.header, pool_->base() + o.offset, sizeof info.header);
  const fg::LogHeader& lh = info.header;
  if (lh.magic != fg::kLogMagic) corrupt_object(info.name, "the log header's magic is wrong");
  if (lh.checksum != fg::log_header_checksum(lh)) corrupt_object(info.name, "the log header fails its checksum");
  const bool hcl = lh.layout == kLayoutHcl;
  if ((!hcl && lh.layout != kLayoutConventional) || (lh.mode != kModeUndo && lh.mode != kModeRedo) ||
      lh.entries_per_slot == 0 || lh.entries_per_slot > fg::kMaxTxEntries || lh.slots == 0 || lh.partition_threads == 0 ||
      lh.partition_threads > fg::kMaxPartitionThreads || lh.slots % lh.partition_threads ||
      (hcl && lh.partition_threads != fg::kWarpLanes) || lh.state_offset != fg::kLogHeaderBytes ||
      lh.entries_offset < lh.state_offset + 8 * lh.slots || lh.entries_offset % 128 ||
      lh.bytes != lh.entries_offset + fg::log_entry_count(lh) * fg::kEntryBytes || lh.bytes > o.bytes)
    corrupt_object(info.name, "the log header's geometry is inconsistent with its extent");
  return info;
}

LogInfo GpmPool::log(const std::string& name) const { return load_log(find(name, fg::kObjectLog)); }

uint64_t* GpmPool::log_state(const LogInfo& log) const {
  return pool_->at<uint64_t>(log.offset + log.header.state_offset);
}
uint64_t* GpmPool::log_entries(const LogInfo& log) const {
  return pool_->at<uint64_t>(log.offset + log.header.entries_offset);
}

uint64_t GpmPool::epoch(const LogInfo& log) const {
  return *reinterpret_cast<volatile uint64_t*>(pool_->base() + log.offset + fg::kEpochOffset);
}

uint64_t GpmPool::begin_launch(const LogInfo& log) {
  auto* e = pool_->at<uint64_t>(log.offset + fg::kEpochOffset);
  const uint64_t next = *e + 1;
  if (next > fg::kMaxEpoch)
    throw Error(ErrorCode::kNoSpace, fmt::format("log \"{}\" used all {} launch epochs: create a new log", log.name, fg::kMaxEpoch));
  *reinterpret_cast<volatile uint64_t*>(e) = next;
  pool_->persist(e, 8);
  return next;
}

GroupInfo GpmPool::create_group(const std::string& name, const std::vector<uint64_t>& element_bytes) {
  if (element_bytes.empty() || element_bytes.size() > fg::kMaxGroupElements)
    invalid("element_bytes", fmt::format("a group has 1..{} elements, not {}", fg::kMaxGroupElements, element_bytes.size()));
  fg::GroupHeader gh{};
  gh.magic = fg::kGroupMagic;
  gh.element_count = static_cast<uint32_t>(element_bytes.size());
  for (size_t e = 0; e < element_bytes.size(); ++e) {
    if (element_bytes[e] == 0) invalid("element_bytes", fmt::format("element {} has no bytes", e));
    gh.element_bytes[e] = element_bytes[e];
    gh.copy_bytes += fg::align_element(element_bytes[e]);
  }
  gh.copy_offset[0] = fg::kGroupHeaderBytes;
  gh.copy_offset[1] = align_up(fg::kGroupHeaderBytes + gh.copy_bytes, 4096);
  gh.checksum = fg::group_header_checksum(gh);
  add_object(name, fg::kObjectGroup, gh.copy_offset[1] + gh.copy_bytes, [&](std::byte* p) {
    std::memcpy(p, &gh, sizeof gh);
    pool_->persist(p, sizeof gh);
  });
  return group(name);
}

GroupInfo GpmPool::load_group(const fg::Object& o) const {
  GroupInfo info{o.name, o.offset, o.bytes, {}};
  std::memcpy(&info.header, pool_->base() + o.offset, sizeof info.header);
  const fg::GroupHeader& gh = info.header;
  if (gh.magic != fg::kGroupMagic) corrupt_object(info.name, "the group header's magic is wrong");
  if (gh.checksum != fg::group_header_checksum(gh)) corrupt_object(info.name, "the group header fails its checksum");
  uint64_t copy = 0;
  for (uint32_t e = 0; e < gh.element_count && e < fg::kMaxGroupElements; ++e) copy += fg::align_element(gh.element_bytes[e]);
  if (gh.element_count == 0 || gh.element_count > fg::kMaxGroupElements || copy != gh.copy_bytes ||
      gh.copy_offset[0] < fg::kGroupHeaderBytes || gh.copy_offset[1] < gh.copy_offset[0] + gh.copy_bytes ||
      gh.copy_offset[1] + gh.copy_bytes > o.bytes)
    corrupt_object(info.name, "the group header's geometry is inconsistent with its extent");
  return info;
}

GroupInfo GpmPool::group(const std::string& name) const { return load_group(find(name, fg::kObjectGroup)); }

CheckpointState GpmPool::valid_checkpoint(const GroupInfo& g) const {
  CheckpointState best;
  for (uint64_t r : fg::kRecordOffset) {
    fg::CheckpointRecord rec;
    std::memcpy(&rec, pool_->base() + g.offset + r, sizeof rec);
    if (rec.sequence == 0 || rec.check != fg::record_check(rec) || rec.copy > 1 || rec.copy_bytes != g.header.copy_bytes)
      continue;
    if (rec.sequence > best.sequence) best = {rec.sequence, rec.copy};
  }
  return best;
}

std::byte* GpmPool::element(const GroupInfo& g, uint32_t copy, uint32_t e) const {
  if (copy > 1 || e >= g.header.element_count)
    invalid("element", fmt::format("group \"{}\" has copies 0..1 and elements 0..{}", g.name, g.header.element_count - 1));
  return pool_->base() + g.offset + g.header.copy_offset[copy] + fg::element_offset(g.header, e);
}

void GpmPool::commit_checkpoint(const GroupInfo& g, uint32_t copy, uint64_t sequence) {
  fg::CheckpointRecord rec{};
  rec.sequence = sequence;
  rec.copy = copy;
  rec.copy_bytes = g.header.copy_bytes;
  rec.check = fg::record_check(rec);
  // Record sequence % 2: the other record (the previous checkpoint) stays whole until this one is.
  auto* dst = pool_->base() + g.offset + fg::kRecordOffset[sequence % 2];
  std::memcpy(dst, &rec, sizeof rec);
  pool_->persist(dst, sizeof rec);
  pool_->sync();
}

CheckpointState GpmPool::checkpoint_from_host(const GroupInfo& g, const std::vector<const void*>& sources) {
  if (sources.size() != g.header.element_count)
    invalid("sources", fmt::format("group \"{}\" has {} elements, {} sources given", g.name, g.header.element_count, sources.size()));
  const CheckpointState valid = valid_checkpoint(g);
  const uint32_t copy = valid.sequence == 0 ? 0 : 1 - valid.copy;
  for (uint32_t e = 0; e < g.header.element_count; ++e) {
    std::byte* dst = element(g, copy, e);
    std::memcpy(dst, sources[e], g.header.element_bytes[e]);
    pool_->persist(dst, g.header.element_bytes[e]);
  }
  pool_->sync();
  commit_checkpoint(g, copy, valid.sequence + 1);
  return {valid.sequence + 1, copy};
}

CheckpointState GpmPool::restore_to_host(const GroupInfo& g, const std::vector<void*>& destinations) const {
  if (destinations.size() != g.header.element_count)
    invalid("destinations", fmt::format("group \"{}\" has {} elements, {} destinations given", g.name,
                                        g.header.element_count, destinations.size()));
  const CheckpointState valid = valid_checkpoint(g);
  if (valid.sequence == 0) return valid;
  for (uint32_t e = 0; e < g.header.element_count; ++e)
    std::memcpy(destinations[e], element(g, valid.copy, e), g.header.element_bytes[e]);
  return valid;
}

}  // namespace gphash::gpm

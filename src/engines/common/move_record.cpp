#include "engines/common/move_record.h"

#include <cstring>
#include <string>

#include "format/slot.h"
#include "gphash/error.h"

namespace gphash::engine {

std::optional<MoveRecord> validate_move_record(const format::PoolHeader& h, uint64_t state, uint64_t from, uint64_t to,
                                               uint64_t checksum) {
  if (state == format::kMoveIdle) return std::nullopt;
  auto corrupt = [](const std::string& why) {
    throw Error(ErrorCode::kCorruptTable,
                "the maintenance record (pool offset 8192) " + why +
                    ": it is not acted on; `gphash repair POOL` clears it and removes any duplicate it leaves");
  };
  if (state != format::kMoveInProgress) corrupt("has an unknown state word " + std::to_string(state));
  if (checksum != format::move_record_checksum(from, to)) corrupt("fails its checksum");
  if (from == to) corrupt("names the same slot as source and target");
  MoveRecord r{format::unpack_slot_address(from), format::unpack_slot_address(to)};
  for (format::SlotAddress a : {r.from, r.to})
    if (a.level < h.gphash.bottom_level || a.level > format::highest_level(h) ||
        a.bucket >= format::level_buckets(a.level) || a.slot >= h.gphash.slots)
      corrupt("names a slot outside the table");
  return r;
}

void resolve_move_record(TableMeta& meta) {
  pool::Pool& pool = meta.pool();
  format::MaintenanceRecord* rec = pool.maintenance();
  const auto move = validate_move_record(meta.header(), __atomic_load_n(&rec->move_state, __ATOMIC_ACQUIRE), rec->move_from,
                                         rec->move_to, rec->move_checksum);
  if (!move) return;
  const format::PoolHeader& h = meta.header();
  const format::BucketLayout layout = format::bucket_layout(h);
  const format::SlotAddress from = move->from, to = move->to;
  std::byte* fb = meta.bucket(from.level, from.bucket);
  std::byte* tb = meta.bucket(to.level, to.bucket);
  auto* fs = reinterpret_cast<uint64_t*>(fb + layout.state_offset(from.slot));
  const auto* ts = reinterpret_cast<const uint64_t*>(tb + layout.state_offset(to.slot));
  const bool same_key = layout.key_is_state() ||
                        std::memcmp(fb + layout.key_offset(from.slot), tb + layout.key_offset(to.slot), h.gphash.key_width) == 0;
  if (format::is_published(*fs) && *fs == *ts && same_key) {
    __atomic_store_n(fs, format::kSlotEmpty, __ATOMIC_RELEASE);
    pool.persist(fs, 8);
  }
  __atomic_store_n(&rec->move_state, format::kMoveIdle, __ATOMIC_RELEASE);
  pool.persist(&rec->move_state, 8);
}

}  // namespace gphash::engine

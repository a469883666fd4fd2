#include "engines/common/move_record.h"

#include <cstring>

#include "format/slot.h"
#include "gphash/error.h"

namespace gphash::engine {

void resolve_move_record(TableMeta& meta) {
  pool::Pool& pool = meta.pool();
  format::MaintenanceRecord* rec = pool.maintenance();
  if (__atomic_load_n(&rec->move_state, __ATOMIC_ACQUIRE) != format::kMoveInProgress) return;
  const format::PoolHeader& h = meta.header();
  const format::BucketLayout layout = format::bucket_layout(h);
  const format::SlotAddress from = format::unpack_slot_address(rec->move_from);
  const format::SlotAddress to = format::unpack_slot_address(rec->move_to);
  for (format::SlotAddress a : {from, to})
    if (a.level < meta.bottom_level() || a.level > meta.highest_level() || a.bucket >= format::level_buckets(a.level) ||
        a.slot >= h.slots)
      throw Error(ErrorCode::kCorruptTable, "the maintenance record names a slot outside the table");
  std::byte* fb = meta.bucket(from.level, from.bucket);
  std::byte* tb = meta.bucket(to.level, to.bucket);
  auto* fs = reinterpret_cast<uint64_t*>(fb + layout.state_offset(from.slot));
  const auto* ts = reinterpret_cast<const uint64_t*>(tb + layout.state_offset(to.slot));
  const bool same_key = layout.key_is_state() ||
                        std::memcmp(fb + layout.key_offset(from.slot), tb + layout.key_offset(to.slot), h.key_width) == 0;
  if (format::is_published(*fs) && *fs == *ts && same_key) {
    __atomic_store_n(fs, format::kSlotEmpty, __ATOMIC_RELEASE);
    pool.persist(fs, 8);
  }
  __atomic_store_n(&rec->move_state, format::kMoveIdle, __ATOMIC_RELEASE);
  pool.persist(&rec->move_state, 8);
}

}  // namespace gphash::engine

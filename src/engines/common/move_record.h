// Recovery of an interrupted displacement move, shared by engines that do not run the CPU
// engine's templated code (the GPU engine calls it on the host before its recovery kernels).
#pragma once

#include <optional>

#include "engines/common/table_meta.h"
#include "format/slot.h"

namespace gphash::engine {

// The slots a maintenance record names, once validated.
struct MoveRecord {
  format::SlotAddress from, to;
};

// Reads a maintenance record's words (already loaded by the caller, so the CPU engine can load
// them through its Memory seam): nullopt when no move is in progress; otherwise the slots, after
// checking the state word, the checksum and that both slots lie in the table. A record that fails
// is never acted on: kCorruptTable, naming what is wrong and that `gphash repair` clears it.
std::optional<MoveRecord> validate_move_record(const format::PoolHeader& h, uint64_t state, uint64_t from, uint64_t to,
                                               uint64_t checksum);

// If the maintenance record says a move was in progress: when both slots hold the item, the copy
// is complete and the original is emptied; otherwise the target (still INSERTING, or EMPTY) is
// left to the INSERTING sweep. Then the record is cleared.
void resolve_move_record(TableMeta& meta);

}  // namespace gphash::engine

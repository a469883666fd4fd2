// Recovery of an interrupted displacement move, shared by engines that do not run the CPU
// engine's templated code (the GPU engine calls it on the host before its recovery kernels).
#pragma once

#include "engines/common/table_meta.h"

namespace gphash::engine {

// If the maintenance record says a move was in progress: when both slots hold the item, the copy
// is complete and the original is emptied; otherwise the target (still INSERTING, or EMPTY) is
// left to the INSERTING sweep. Then the record is cleared.
void resolve_move_record(TableMeta& meta);

}  // namespace gphash::engine

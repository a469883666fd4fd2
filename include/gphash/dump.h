// Dumps: every item of a table in a file, to copy, inspect or back up a pool's data and load it
// into another pool (`gphash dump`, `gphash import`). Two formats, both documented in
// docs/FORMAT.md section 11:
//   jsonl   one JSON object per line: a header line with the widths, one line per item with key
//           and value in hex, and an end line with the item count (a cut-off file is detected);
//   binary  a 32-byte header, the items as raw key and value bytes, a trailer with the item count
//           and an XXH64 of everything before it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "gphash/table.h"

namespace gphash {

enum class DumpFormat { kJsonl, kBinary };

struct DumpOptions {
  DumpFormat format = DumpFormat::kJsonl;
  uint32_t file_mode = 0600;         // permissions of a dump file (exactly these)
  size_t chunk_items = size_t{1} << 16;  // items per export call
};

struct DumpResult {
  uint64_t items = 0;
  uint64_t damaged = 0;  // items left out: their values fail their checksums
};

struct ImportResult {
  uint64_t items = 0;   // items stored
  uint64_t failed = 0;  // items the pool could not take (kTableFull / kHeapFull)
};

// Writes every item to `path`: into a temporary file beside it, synced, then renamed, so the file
// at `path` is always a whole dump.
DumpResult dump_table(Table& table, const std::string& path, const DumpOptions& options = {});
// Writes every item to an open stream (standard output).
DumpResult dump_table(Table& table, std::FILE* out, const DumpOptions& options = {});
// Stores every item of a dump (upserts), after checking the whole file first: a damaged,
// truncated or mismatched dump (kCorruptFile, or a width mismatch naming the width) changes
// nothing.
ImportResult import_dump(Table& table, const std::string& path);

}  // namespace gphash

// Reading and validating a snapshot file (file_format.h). Every check names the file and what is
// wrong: kCorruptFile for a damaged, truncated or foreign file, kUnsupportedVersion for a format
// this build cannot read. Nothing here writes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "snapshot/file_format.h"
#include "snapshot/file_system.h"

namespace gphash::snapshot {

// Reads both superblock copies and returns the current one (the valid copy with the higher
// generation; a copy torn by a crash falls back to the other). `copy` receives its index.
Superblock read_superblock(File& file, const std::string& path, int* copy = nullptr);

struct Segment {
  uint64_t offset = 0;  // in the file
  SegmentHeader header{};
  std::vector<PageEntry> index;
  uint64_t data_offset() const { return offset + kPageBytes; }
};

struct Chain {
  Superblock superblock{};
  std::vector<Segment> segments;
};

// The current superblock and every committed segment, with each header and index validated
// (checksums, sequence, chain links, sizes, page numbers). Data pages are verified against their
// hashes by whoever reads them (restore).
Chain read_chain(File& file, const std::string& path);

}  // namespace gphash::snapshot

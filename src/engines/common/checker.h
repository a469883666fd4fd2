// `gphash check`: verifies a pool's table against the format's invariants, independently of the
// engines (it reads the pool with the format's definitions only).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "pool/pool.h"

namespace gphash::engine {

struct CheckReport {
  bool ok = true;
  std::string violation;  // the first violation found (lowest slot address), empty when ok
  uint64_t items = 0;     // published slots
  uint64_t inserting = 0; // slots left INSERTING (none after recovery)
  uint64_t slots = 0;     // slots in the active levels
};

// Checked: no slot INSERTING, no resize or move left half done; every published slot sits in a
// candidate bucket of its key with the key's fingerprint; no key has a second published copy
// (so every stored key is what a lookup finds); heap references are inside the heap and no two
// slots share a cell; the number of items equals `expected_items` when given.
CheckReport check_table(const pool::Pool& pool, int threads, std::optional<uint64_t> expected_items);

}  // namespace gphash::engine

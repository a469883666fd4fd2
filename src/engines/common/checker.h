// `gphash check` and `gphash repair`: verify a pool's table against the format's invariants,
// independently of the engines (the pool is read with the format's definitions only).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "format/slot.h"
#include "pool/pool.h"

namespace gphash::engine {

// A slot that breaks an invariant, and what `gphash repair` does about it: empty the slot.
struct DamagedSlot {
  format::SlotAddress at;
  std::string key_hex;  // the key bytes the slot holds, in hex
  std::string reason;
};

struct CheckOptions {
  int threads = 1;
  std::optional<uint64_t> expected_items;  // compared with the published slots when given
  bool collect_damage = false;             // fill CheckReport::damaged (for repair)
};

struct CheckReport {
  bool ok = true;
  std::string violation;    // the first violation (lowest address first), with its location
  uint64_t violations = 0;  // how many were found in all
  uint64_t items = 0;       // published slots
  uint64_t inserting = 0;   // slots left INSERTING (none after recovery)
  uint64_t slots = 0;       // slots in the active levels
  uint64_t values_verified = 0;  // heap values whose checksum was verified (pools with value checksums)
  // With collect_damage: every slot repair empties. Of a key's duplicate copies all but the valid
  // one; of slots sharing a heap cell all but the one whose value checksum verifies (without
  // checksums the owner cannot be told, so all of them).
  std::vector<DamagedSlot> damaged;
  bool move_record_damaged = false;  // the maintenance record is corrupt (repair clears it)
};

// Checked: no resize or move left half done and a maintenance record that is idle or intact; no
// slot INSERTING; every published slot sits in a candidate bucket of its key with the key's
// fingerprint, holds no reserved key and is its key's only published copy (so every stored key is
// what a lookup finds); heap references are inside the heap, no two slots share a cell and, with
// value checksums, every value matches its checksum; the number of items equals
// `expected_items` when given. Value bytes are not checked on pools without value checksums.
CheckReport check_table(const pool::Pool& pool, const CheckOptions& options);

std::string describe(format::SlotAddress at);

}  // namespace gphash::engine

// Batched operations.
//
// Batch semantics: within one batch, the operations on one key take effect one at a time in
// batch order: each sees the effects of the earlier operations of the batch on its key and none
// of the later ones. Operations on different keys are independent. So a batch gives the same
// results as running its operations one by one, in order, on a std::unordered_map, whatever the
// engine or number of threads. Batches that write are applied one at a time per table; batches
// that only search may run concurrently with each other.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gphash {

enum class Op : uint8_t {
  kSearch = 0,  // value of the key, if present
  kInsert = 1,  // add the key if absent; kExists (and no change) if present
  kUpsert = 2,  // add the key or overwrite its value
  kUpdate = 3,  // overwrite the value of a present key; kNotFound if absent
  kErase = 4,   // remove the key; kNotFound if absent
};

enum class OpStatus : uint8_t {
  kOk = 0,           // done (search: found, value written)
  kNotFound = 1,     // search, update, erase: no such key
  kExists = 2,       // insert: the key is present; nothing changed
  kHeapFull = 3,     // the value heap is full and cannot grow; nothing changed
  kTableFull = 4,    // no free slot and the table cannot grow; nothing changed
  kReservedKey = 5,  // 8-byte keys 0xFFFFFFFFFFFFFFFF and 0xFFFFFFFFFFFFFFFE are reserved
  // search, on a pool with value checksums: the stored value fails its checksum (its heap cell is
  // damaged); the bytes are not the value. `gphash check` locates it, `gphash repair` drops it.
  kCorruptValue = 6,
  // An entry of `ops` is not an Op (batches in GPU memory only: the host cannot check their ops
  // before they run, so the entry is reported and skipped).
  kInvalidOp = 7,
};

const char* to_string(Op op) noexcept;
const char* to_string(OpStatus status) noexcept;

enum class MemorySpace : uint8_t {
  kHost = 0,    // the batch's arrays are in host memory
  kDevice = 1,  // in GPU memory (GPU engine only)
};

struct Batch {
  size_t size = 0;
  uint32_t key_width = 0;    // bytes per key in `keys`; must equal the pool's key width
  uint32_t value_width = 0;  // bytes per value in `values`/`values_out`; must equal the pool's
  Op op = Op::kSearch;       // the operation of every entry, unless `ops` is given
  const Op* ops = nullptr;   // per-entry operations (a mixed batch)
  const void* keys = nullptr;    // size * key_width bytes
  const void* values = nullptr;  // size * value_width bytes: inputs of insert, upsert, update
  void* values_out = nullptr;    // size * value_width bytes: search results (optional)
  OpStatus* status = nullptr;    // size entries (required)
  MemorySpace memory = MemorySpace::kHost;
};

}  // namespace gphash

// The GPM section of the pool header (header offset 256, selected by index_kind = 3).
// docs/FORMAT.md section 13 documents every byte; the static_asserts pin the offsets it states.
//
// A GPM pool is an ordinary pool (src/pool: same two header copies, checksums and generations)
// whose index section is a directory of named objects, each an extent of the pool:
//   - regions: memory kernels read and write in place (gpm::GpmPool::region);
//   - logs:    undo/redo logs, HCL or conventional (format/gpm/log.h);
//   - groups:  checkpoint groups, two copies and a valid-copy record (format/gpm/checkpoint.h).
// Creating an object allocates its extent and then writes a new header naming it, so an object
// exists wholly or not at all after a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gphash::format {

struct PoolHeader;

namespace gpm {

inline constexpr uint32_t kMaxObjects = 64;
inline constexpr uint32_t kNameBytes = 32;  // NUL-terminated, so names have at most 31 bytes

enum ObjectKind : uint32_t {
  kObjectRegion = 1,
  kObjectLog = 2,
  kObjectGroup = 3,
};

struct Object {
  char name[kNameBytes];
  uint32_t kind;  // ObjectKind
  uint32_t reserved;
  uint64_t offset;  // extent start (pool offset), a multiple of 4096
  uint64_t bytes;   // extent length
};
static_assert(sizeof(Object) == 56);
static_assert(offsetof(Object, kind) == 32);
static_assert(offsetof(Object, offset) == 40);

}  // namespace gpm

struct GpmMeta {
  uint32_t object_count;  // objects[0, object_count) are in use; the rest are zero
  uint32_t reserved0;
  uint64_t reserved1;
  gpm::Object objects[gpm::kMaxObjects];
};
static_assert(offsetof(GpmMeta, objects) == 16);
static_assert(sizeof(GpmMeta) == 16 + 56 * 64);

// Checks the GPM section of a header whose common part is valid (called by validate_header for
// index_kind 3); throws gphash::Error (kCorruptHeader) naming the field. Adds the objects' extents
// to `extents` for the caller's overlap check.
void validate_gpm_section(const PoolHeader& h, std::vector<std::pair<uint64_t, uint64_t>>& extents);

// One line per object, for describe().
std::string describe_gpm_section(const PoolHeader& h);

}  // namespace gphash::format

// Record ids to key bytes and value bytes of a pool's widths.
//
// Keys: a record id r (< 2^63) becomes an 8-, 16- or 32-byte key whose first 8 bytes are
// key_word(r), a fixed 64-bit bijective mix of r, so keys of different records always
// differ and look random (a hash table sees no structure in consecutive ids). Words 1-3 of
// wider keys are further independent mixes of r. All multi-byte words are little-endian.
//
// Reserved keys: the table reserves the 8-byte keys 0xFFFFFFFFFFFFFFFF and
// 0xFFFFFFFFFFFFFFFE. The mix's two preimages of those words are both >= 2^63 (checked by a
// static_assert in records.cpp), which is why record ids must be below 2^63: no valid id can
// produce a reserved key, at no run-time cost.
//
// Values are self-checking, so a crash test can tell a torn, stale-but-whole, or misplaced
// value. Layout by width w (little-endian):
//   w >= 16:   bytes 0-7 version (64 bits), bytes 8-15 a 64-bit checksum of (record,
//              version, bytes 16..w-1), bytes 16..w-1 filler derived from (record, version).
//   8 <= w < 16: bytes 0-7 hold (version mod 2^40) | check << 40, where check is a 24-bit
//              hash of (record, version mod 2^40); bytes 8..w-1 filler from (record, version).
//   w < 8:     the low w bytes of version XOR a pad derived from the record. There is no room
//              for a check: every byte pattern decodes to some version, so check_value
//              always succeeds and the caller must compare the decoded version with the one
//              it expects. The pad makes a value written for another record decode to an
//              unrelated version, so that comparison also catches misplaced values.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace gphash::workload {

// Record ids must be below this.
inline constexpr uint64_t kRecordIdLimit = 1ULL << 63;
// 8-byte keys the table reserves for its own slot states; key_word never returns them.
inline constexpr std::array<uint64_t, 2> kReservedKeyWords = {0xFFFFFFFFFFFFFFFFULL,
                                                              0xFFFFFFFFFFFFFFFEULL};
inline constexpr uint32_t kMaxValueWidth = 4096;

// The first 8 bytes of every key of `record`, as a little-endian integer.
// Throws std::invalid_argument if record >= kRecordIdLimit.
uint64_t key_word(uint64_t record);

// The record whose key_word is `key`, or nothing if no record id below 2^63 produces it
// (e.g. a reserved word). Lets a verifier that scans a table map keys back to records.
std::optional<uint64_t> record_of_key_word(uint64_t key);

// The ids the key mix sends to kReservedKeyWords (both >= kRecordIdLimit, so never valid).
std::array<uint64_t, 2> reserved_key_preimages();

// Writes key_width bytes (8, 16 or 32) to out. Throws std::invalid_argument for another
// width or a record >= kRecordIdLimit.
void make_key(uint64_t record, uint32_t key_width, std::byte* out);

// Writes value_width bytes (1 .. kMaxValueWidth) to out, in the layout above. Throws
// std::invalid_argument for a width outside that range. Widths below 16 keep only
// stored_version_bits(width) bits of the version.
void make_value(uint64_t record, uint64_t version, uint32_t value_width, std::byte* out);

// True iff `value` is exactly what make_value(record, v, value_width) writes for the version
// v stored in it; then *version_out (if not null) receives v, otherwise it is left alone.
// For widths >= 8 a torn, corrupted or misplaced value fails (for 8..15 with probability
// 1 - 2^-24 when only the first 8 bytes differ; for >= 16 with probability 1 - 2^-64 or
// better). For widths < 8 it always returns true: see the header comment.
// Throws std::invalid_argument for a width outside 1 .. kMaxValueWidth.
bool check_value(uint64_t record, const std::byte* value, uint32_t value_width,
                 uint64_t* version_out);

// How many low bits of the version a value of this width keeps: 64, 40, or 8 * width.
uint32_t stored_version_bits(uint32_t value_width);

}  // namespace gphash::workload

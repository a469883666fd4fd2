#include "workload/records.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>

#include "workload/random.h"

namespace gphash::workload {
namespace {

// Key mix: XOR with a family constant, then MurmurHash3's fmix64 finalizer (xorshifts and
// odd multiplications, each invertible). A different function from the SplitMix64 mix the
// samplers and value filler use, so keys are unrelated to anything else generated here.
constexpr uint64_t kKeyFamily = 0x5851F42D4C957F2DULL;
constexpr uint64_t kKeyMultiplier1 = 0xFF51AFD7ED558CCDULL;
constexpr uint64_t kKeyMultiplier2 = 0xC4CEB9FE1A85EC53ULL;

constexpr uint64_t key_mix(uint64_t x) {
  x ^= kKeyFamily;
  x ^= x >> 33;
  x *= kKeyMultiplier1;
  x ^= x >> 33;
  x *= kKeyMultiplier2;
  x ^= x >> 33;
  return x;
}

// Multiplicative inverse modulo 2^64 of an odd number: Newton's iteration doubles the
// number of correct low bits each step (x = m is right in 3 bits for odd m).
constexpr uint64_t inverse_mod_2_64(uint64_t m) {
  uint64_t x = m;
  for (int i = 0; i < 5; ++i) x *= 2 - m * x;
  return x;
}

constexpr uint64_t undo_xorshift_right(uint64_t y, unsigned shift) {
  uint64_t x = y;
  for (unsigned known = shift; known < 64; known += shift) x = y ^ (x >> shift);
  return x;
}

constexpr uint64_t key_unmix(uint64_t y) {
  y = undo_xorshift_right(y, 33);
  y *= inverse_mod_2_64(kKeyMultiplier2);
  y = undo_xorshift_right(y, 33);
  y *= inverse_mod_2_64(kKeyMultiplier1);
  y = undo_xorshift_right(y, 33);
  return y ^ kKeyFamily;
}

static_assert(inverse_mod_2_64(kKeyMultiplier1) * kKeyMultiplier1 == 1);
static_assert(key_unmix(key_mix(0)) == 0 && key_unmix(key_mix(~0ULL)) == ~0ULL &&
              key_unmix(key_mix(0x0123456789ABCDEFULL)) == 0x0123456789ABCDEFULL);
static_assert(key_unmix(kReservedKeyWords[0]) >= kRecordIdLimit &&
                  key_unmix(kReservedKeyWords[1]) >= kRecordIdLimit,
              "a record id below 2^63 would map to a reserved key: change kKeyFamily until "
              "both preimages of the reserved words are >= 2^63");

// Salts that make the other key words and the value fields independent functions of the
// record (arbitrary odd constants: fractional digits of sqrt(2), sqrt(3), pi, e).
constexpr uint64_t kKeyWordSalts[3] = {0x6A09E667F3BCC909ULL, 0xBB67AE8584CAA73BULL,
                                       0x3C6EF372FE94F82BULL};
constexpr uint64_t kValueSalt = 0xA54FF53A5F1D36F1ULL;
constexpr uint64_t kChecksumSalt = 0x510E527FADE682D1ULL;
constexpr uint64_t kShortCheckSalt = 0x9B05688C2B3E6C1FULL;
constexpr uint64_t kPadSalt = 0x1F83D9ABFB41BD6BULL;

constexpr uint64_t kVersion40Mask = (1ULL << 40) - 1;

// Byte order is fixed (little-endian) so pools and traces compare across machines; the
// memcpy paths are what compilers turn into single loads and stores.
void store_le64(uint64_t word, std::byte* out, size_t bytes = 8) {
  if (bytes == 8 && std::endian::native == std::endian::little) {
    std::memcpy(out, &word, 8);
    return;
  }
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<std::byte>(word >> (8 * i));
}

uint64_t load_le64(const std::byte* in, size_t bytes = 8) {
  uint64_t word = 0;
  if (bytes == 8 && std::endian::native == std::endian::little) {
    std::memcpy(&word, in, 8);
    return word;
  }
  for (size_t i = 0; i < bytes; ++i) word |= static_cast<uint64_t>(in[i]) << (8 * i);
  return word;
}

void require_record_id(uint64_t record) {
  if (record >= kRecordIdLimit) {
    throw std::invalid_argument("record id " + std::to_string(record) +
                                " is >= 2^63; record ids must be below 2^63 so that no key "
                                "collides with the table's reserved keys");
  }
}

void require_value_width(uint32_t value_width) {
  if (value_width == 0 || value_width > kMaxValueWidth) {
    throw std::invalid_argument("value width " + std::to_string(value_width) +
                                " is unsupported; use 1 to " + std::to_string(kMaxValueWidth) +
                                " bytes");
  }
}

uint64_t filler_seed(uint64_t record, uint64_t version) {
  return splitmix64_mix(splitmix64_mix(record ^ kValueSalt) ^ version);
}

// Filler bytes, 8 per SplitMix64 word, the last word truncated.
void write_filler(uint64_t record, uint64_t version, std::byte* out, size_t bytes) {
  SplitMix64 stream(filler_seed(record, version));
  for (size_t offset = 0; offset < bytes; offset += 8) {
    store_le64(stream.next(), out + offset, std::min<size_t>(8, bytes - offset));
  }
}

constexpr uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// Checksum of (record, version, body). Each round multiplies by an odd constant and rotates,
// so any change to one body word changes the state, and the final mix with the length
// spreads it over all 64 bits.
uint64_t value_checksum(uint64_t record, uint64_t version, const std::byte* body, size_t bytes) {
  uint64_t state = splitmix64_mix(splitmix64_mix(record ^ kChecksumSalt) ^ version);
  for (size_t offset = 0; offset < bytes; offset += 8) {
    const uint64_t word = load_le64(body + offset, std::min<size_t>(8, bytes - offset));
    state = rotl(state ^ (word * 0x9E3779B97F4A7C15ULL), 31) * 0xD6E8FEB86659FD93ULL;
  }
  return splitmix64_mix(state ^ bytes);
}

uint64_t short_check(uint64_t record, uint64_t version40) {
  return splitmix64_mix(splitmix64_mix(record ^ kShortCheckSalt) ^ version40) >> 40;
}

uint64_t record_pad(uint64_t record) { return splitmix64_mix(record ^ kPadSalt); }

}  // namespace

uint64_t key_word(uint64_t record) {
  require_record_id(record);
  return key_mix(record);
}

std::optional<uint64_t> record_of_key_word(uint64_t key) {
  const uint64_t record = key_unmix(key);
  if (record >= kRecordIdLimit) return std::nullopt;
  return record;
}

std::array<uint64_t, 2> reserved_key_preimages() {
  return {key_unmix(kReservedKeyWords[0]), key_unmix(kReservedKeyWords[1])};
}

void make_key(uint64_t record, uint32_t key_width, std::byte* out) {
  if (key_width != 8 && key_width != 16 && key_width != 32) {
    throw std::invalid_argument("key width " + std::to_string(key_width) +
                                " is unsupported; use 8, 16 or 32 bytes");
  }
  store_le64(key_word(record), out);
  for (uint32_t word = 1; word < key_width / 8; ++word) {
    store_le64(splitmix64_mix(record ^ kKeyWordSalts[word - 1]), out + 8 * word);
  }
}

uint32_t stored_version_bits(uint32_t value_width) {
  require_value_width(value_width);
  if (value_width >= 16) return 64;
  if (value_width >= 8) return 40;
  return 8 * value_width;
}

void make_value(uint64_t record, uint64_t version, uint32_t value_width, std::byte* out) {
  require_value_width(value_width);
  if (value_width >= 16) {
    store_le64(version, out);
    write_filler(record, version, out + 16, value_width - 16);
    store_le64(value_checksum(record, version, out + 16, value_width - 16), out + 8);
  } else if (value_width >= 8) {
    const uint64_t version40 = version & kVersion40Mask;
    store_le64(version40 | (short_check(record, version40) << 40), out);
    write_filler(record, version40, out + 8, value_width - 8);
  } else {
    store_le64(version ^ record_pad(record), out, value_width);
  }
}

bool check_value(uint64_t record, const std::byte* value, uint32_t value_width,
                 uint64_t* version_out) {
  const uint32_t version_bits = stored_version_bits(value_width);
  if (value_width < 8) {
    const uint64_t version = (load_le64(value, value_width) ^ record_pad(record)) &
                             ((1ULL << version_bits) - 1);
    if (version_out != nullptr) *version_out = version;
    return true;
  }
  uint64_t version = load_le64(value);
  if (version_bits == 40) version &= kVersion40Mask;
  // Regenerating the whole value checks the checksum, the short check and the filler at
  // once, and is no slower than verifying the checksum alone.
  std::byte expected[kMaxValueWidth];
  make_value(record, version, value_width, expected);
  if (std::memcmp(expected, value, value_width) != 0) return false;
  if (version_out != nullptr) *version_out = version;
  return true;
}

}  // namespace gphash::workload

// RowFile: the embedding rows of an EmbeddingStore, in a file beside the Table's pool
// ("NAME" -> /dev/shm/NAME.rows, a path -> PATH.rows, "mem:" -> anonymous memory).
//
// Layout: a 4096-byte header (RowFileHeader), then `host_rows` rows of `stride` bytes each, so
// every row starts 32-byte aligned and never straddles more 128-byte segments than its size needs.
// A store with a tier (host_rows below capacity) keeps all its rows in a tier file (FileTier) on a
// file system below host memory, the store's substitute for GDRec's NVMe tier, and this file's
// rows are slots holding copies of some of them (embedding_store.cpp, Impl).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gphash::embedding {

struct RowFileHeader {
  char magic[8];          // "GPHROWS1"
  uint32_t version;       // 2; version 1 files (no tier fields: every row here) open as before
  uint32_t dtype;         // RowType
  uint32_t dim;           // elements per row
  uint32_t stride;        // bytes from one row to the next
  uint64_t capacity;      // rows
  float default_value;    // the row of a missing ID (every element)
  uint32_t reserved;
  uint64_t checksum;      // of the fields above
  uint64_t next_row;      // rows ever handed out (bump allocator; reused rows come from the free list)
  // Version 2:
  uint64_t host_rows;       // rows in this file (with a tier: slots for copies of tier rows)
  char tier_path[512];      // the tier file, "" when host_rows == capacity
  uint64_t tier_checksum;   // of host_rows and tier_path
};
inline constexpr size_t kRowDataOffset = 4096;
inline constexpr size_t kTierPathBytes = sizeof(RowFileHeader::tier_path);
// docs/FORMAT.md section 10 documents these offsets.
static_assert(offsetof(RowFileHeader, dtype) == 12 && offsetof(RowFileHeader, stride) == 20);
static_assert(offsetof(RowFileHeader, capacity) == 24 && offsetof(RowFileHeader, default_value) == 32);
static_assert(offsetof(RowFileHeader, checksum) == 40 && offsetof(RowFileHeader, next_row) == 48);
static_assert(offsetof(RowFileHeader, host_rows) == 56 && offsetof(RowFileHeader, tier_path) == 64);
static_assert(offsetof(RowFileHeader, tier_checksum) == 576 && sizeof(RowFileHeader) <= kRowDataOffset);

class RowFile {
 public:
  RowFile() = default;
  // host_rows: rows in this file; below capacity, the store's rows are in the tier file at tier_path.
  static RowFile create(const std::string& pool, uint32_t dtype, uint32_t dim, uint32_t stride, uint64_t capacity,
                        uint64_t host_rows, const std::string& tier_path, float default_value, bool replace);
  static RowFile open(const std::string& pool);
  RowFile(RowFile&&) noexcept;
  RowFile& operator=(RowFile&&) noexcept;
  ~RowFile();

  RowFileHeader& header() const { return *reinterpret_cast<RowFileHeader*>(base_); }
  std::byte* row(uint64_t index) const { return base_ + kRowDataOffset + index * header().stride; }  // < host_rows()
  uint64_t host_rows() const { return host_rows_; }
  bool has_tier() const { return host_rows_ < header().capacity; }
  std::string tier_path() const { return has_tier() ? std::string(header().tier_path) : std::string(); }
  std::byte* data() const { return base_ + kRowDataOffset; }
  size_t data_bytes() const { return bytes_ - kRowDataOffset; }
  bool is_file() const { return regular_file_; }  // a regular file: writes need msync
  void persist();  // msync for regular files; nothing for shm or memory (stores are visible)
  const std::string& path() const { return path_; }
  static std::string path_for(const std::string& pool);
  static void remove(const std::string& pool);

 private:
  std::byte* base_ = nullptr;
  size_t bytes_ = 0;
  uint64_t host_rows_ = 0;  // version 1 files: capacity
  bool regular_file_ = false;
  std::string path_;
};

}  // namespace gphash::embedding

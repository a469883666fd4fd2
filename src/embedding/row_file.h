// RowFile: the embedding rows of an EmbeddingStore, in a file beside the Table's pool
// ("NAME" -> /dev/shm/NAME.rows, a path -> PATH.rows, "mem:" -> anonymous memory).
//
// Layout: a 4096-byte header (RowFileHeader), then `capacity` rows of `stride` bytes each, so
// every row starts 32-byte aligned and never straddles more 128-byte segments than its size needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gphash::embedding {

struct RowFileHeader {
  char magic[8];          // "GPHROWS1"
  uint32_t version;       // 1
  uint32_t dtype;         // RowType
  uint32_t dim;           // elements per row
  uint32_t stride;        // bytes from one row to the next
  uint64_t capacity;      // rows
  float default_value;    // the row of a missing ID (every element)
  uint32_t reserved;
  uint64_t checksum;      // of the fields above
  uint64_t next_row;      // rows ever handed out (bump allocator; reused rows come from the free list)
};
inline constexpr size_t kRowDataOffset = 4096;
// docs/FORMAT.md section 10 documents these offsets.
static_assert(offsetof(RowFileHeader, dtype) == 12 && offsetof(RowFileHeader, stride) == 20);
static_assert(offsetof(RowFileHeader, capacity) == 24 && offsetof(RowFileHeader, default_value) == 32);
static_assert(offsetof(RowFileHeader, checksum) == 40 && offsetof(RowFileHeader, next_row) == 48);

class RowFile {
 public:
  RowFile() = default;
  static RowFile create(const std::string& pool, uint32_t dtype, uint32_t dim, uint32_t stride, uint64_t capacity,
                        float default_value, bool replace);
  static RowFile open(const std::string& pool);
  RowFile(RowFile&&) noexcept;
  RowFile& operator=(RowFile&&) noexcept;
  ~RowFile();

  RowFileHeader& header() const { return *reinterpret_cast<RowFileHeader*>(base_); }
  std::byte* row(uint64_t index) const { return base_ + kRowDataOffset + index * header().stride; }
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
  bool regular_file_ = false;
  std::string path_;
};

}  // namespace gphash::embedding

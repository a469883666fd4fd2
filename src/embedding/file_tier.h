// FileTier: embedding rows in a regular file, below host memory (issue 9, item 5).
//
// GDRec reads rows that are not in host memory straight from NVMe with a GPU-driven driver; our
// machines have no NVMe the GPU can drive, so this is the substitute: the CPU reads the rows with
// io_uring (many reads in flight, O_DIRECT where the file system allows it, so the page cache
// does not hide the device) into a caller buffer, which for the GPU is pinned host memory that a
// copy or a zero-copy gather then moves on. Rows are addressed by row index (the same index the
// store's Table maps IDs to); each occupies `stride` bytes, a multiple of 512, so every read is
// sector-aligned. Without liburing at build time, or where the kernel refuses io_uring, reads
// fall back to pread (uses_io_uring() says which ran). An EmbeddingStore created with host_rows
// below its capacity keeps every row in one (StoreConfig::tier_path), copies of some in host memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gphash::embedding {

class FileTier {
 public:
  // Creates (or replaces) a tier file for `capacity` rows of `row_bytes` bytes.
  static FileTier create(const std::string& path, uint32_t row_bytes, uint64_t capacity);
  // Opens an existing tier file with these dimensions (its rows stay).
  static FileTier open(const std::string& path, uint32_t row_bytes, uint64_t capacity);
  FileTier(FileTier&&) noexcept;
  FileTier& operator=(FileTier&&) noexcept;
  ~FileTier();

  uint32_t row_bytes() const { return row_bytes_; }
  uint32_t stride() const { return stride_; }
  uint64_t capacity() const { return capacity_; }
  bool uses_io_uring() const { return ring_ != nullptr; }
  bool direct() const { return direct_; }

  // Writes rows (n * row_bytes) at these indices, then fsyncs.
  void write_rows(const uint64_t* rows, size_t n, const void* data);
  // Reads rows at these indices into `out` (n * row_bytes), with up to `queue_depth` reads in
  // flight (io_uring) or one at a time (pread, or when use_io_uring is false).
  void read_rows(const uint64_t* rows, size_t n, void* out, bool use_io_uring = true);

 private:
  FileTier() = default;
  static FileTier start(const std::string& path, uint32_t row_bytes, uint64_t capacity, bool create);
  void read_pread(const uint64_t* rows, size_t n, void* out);
  int fd_ = -1;
  bool direct_ = false;
  uint32_t row_bytes_ = 0, stride_ = 0, queue_depth_ = 128;
  uint64_t capacity_ = 0;
  std::string path_;
  void* ring_ = nullptr;        // struct io_uring*, when liburing is there and the kernel allows it
  std::byte* bounce_ = nullptr;  // queue_depth * stride bytes, 4096-aligned (O_DIRECT needs aligned buffers)
};

}  // namespace gphash::embedding

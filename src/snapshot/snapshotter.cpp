#include "snapshot/snapshotter.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "engines/common/crash_point.h"
#include "gphash/error.h"
#include "snapshot/snapshot_reader.h"

namespace gphash::snapshot {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

uint64_t unix_ns_now() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

constexpr char kTempInfix[] = ".snapshot-tmp-";
constexpr uint64_t kStagingPages = 256;  // pages per write of the first pass (1 MiB)

// One segment being built in `file` at `offset`. Pages of the first pass arrive in ascending
// order, each staged and written to the next data slot; pages of the capture then overwrite their
// slot (or take a new one). The index lists the data pages in slot order, then the zero pages.
class SegmentBuilder {
 public:
  SegmentBuilder(File& file, uint64_t offset, bool base) : file_(file), offset_(offset), base_(base) {
    staging_.resize(kStagingPages * kPageBytes);
  }

  // First pass: `src` may be changing under us; such a page is marked again and fixed by
  // capture_page().
  void first_pass_page(uint64_t page, const std::byte* src) {
    std::byte* buf = staging_.data() + staged_ * kPageBytes;
    std::memcpy(buf, src, kPageBytes);
    if (page_is_zero(buf)) {
      if (!base_) records_.push_back({page | kZeroPageFlag, 0, -1});  // a base starts from zeros
      return;
    }
    records_.push_back({page, page_hash(buf, page), static_cast<int64_t>(slots_)});
    ++slots_;
    if (++staged_ == kStagingPages) flush();
  }

  void flush() {
    if (staged_ == 0) return;
    write(slot_offset(slots_ - staged_), staging_.data(), staged_ * kPageBytes);
    staged_ = 0;
  }

  // The page as captured, writers held off when it was copied.
  void capture_page(uint64_t page, const std::byte* data) {
    const bool zero = page_is_zero(data);
    Record* known = find(page);
    if (known && known->slot >= 0) {  // overwrite its slot, zero or not
      known->hash = page_hash(data, page);
      write(slot_offset(static_cast<uint64_t>(known->slot)), data, kPageBytes);
      return;
    }
    if (zero) {
      if (!base_ && !known) extra_.push_back({page | kZeroPageFlag, 0, -1});
      return;
    }
    if (known) known->dropped = true;  // a zero entry of the first pass, superseded below
    extra_.push_back({page, page_hash(data, page), static_cast<int64_t>(slots_)});
    write(slot_offset(slots_), data, kPageBytes);
    ++slots_;
  }

  // Writes the index and the header; returns the header (its checksum set).
  SegmentHeader finish(SegmentHeader h) {
    flush();
    std::vector<PageEntry> data_entries, zero_entries;
    for (const std::vector<Record>* list : {&records_, &extra_})
      for (const Record& r : *list) {
        if (r.dropped) continue;
        (r.slot >= 0 ? data_entries : zero_entries).push_back({r.page, r.hash});
      }
    // Data entries are already in slot order: the first pass's ascending slots, then the capture's.
    data_entries.insert(data_entries.end(), zero_entries.begin(), zero_entries.end());
    h.entry_count = data_entries.size();
    h.data_pages = slots_;
    h.segment_bytes = segment_bytes_for(h.data_pages, h.entry_count);
    h.index_checksum = index_checksum(data_entries.data(), h.entry_count);
    std::vector<std::byte> index(static_cast<size_t>(round_to_page(h.entry_count * sizeof(PageEntry))));
    std::memcpy(index.data(), data_entries.data(), h.entry_count * sizeof(PageEntry));
    if (!index.empty()) write(slot_offset(slots_), index.data(), index.size());
    h.checksum = checksum_of(h);
    write(offset_, &h, sizeof h);
    return h;
  }

  uint64_t bytes_written() const { return bytes_written_; }
  uint64_t data_pages() const { return slots_; }

 private:
  struct Record : PageEntry {
    int64_t slot;  // data slot, -1 for a zero page
    bool dropped = false;
    Record(uint64_t p, uint64_t h, int64_t s) : PageEntry{p, h}, slot(s) {}
  };

  uint64_t slot_offset(uint64_t slot) const { return offset_ + kPageBytes + slot * kPageBytes; }
  void write(uint64_t at, const void* data, size_t n) {
    file_.write_at(at, data, n);
    bytes_written_ += n;
  }
  // The first pass's record of `page` (records_ is sorted by page), or null.
  Record* find(uint64_t page) {
    auto it = std::lower_bound(records_.begin(), records_.end(), page,
                               [](const Record& r, uint64_t p) { return (r.page & kPageNumberMask) < p; });
    return it == records_.end() || (it->page & kPageNumberMask) != page ? nullptr : &*it;
  }

  File& file_;
  uint64_t offset_;
  bool base_;
  std::vector<std::byte> staging_;
  uint64_t staged_ = 0, slots_ = 0, bytes_written_ = 0;
  std::vector<Record> records_, extra_;
};

template <class F>
void for_each_marked(const std::vector<uint64_t>& bits, F&& f) {
  for (size_t w = 0; w < bits.size(); ++w)
    for (uint64_t b = bits[w]; b != 0; b &= b - 1) f(uint64_t{w} * 64 + static_cast<uint64_t>(__builtin_ctzll(b)));
}

std::string hex(const unsigned char* bytes, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += fmt::format("{:02x}", bytes[i]);
  return s;
}

}  // namespace

uint64_t pool_writes(const pool::Pool& pool) {
  return __atomic_load_n(pool.at<uint64_t>(format::kWriteCounterOffset), __ATOMIC_ACQUIRE);
}

void count_pool_writes(pool::Pool& pool, uint64_t operations) {
  // A read-only pool is never written; a batch of GPU-memory ops the host cannot read may still
  // reach one (its writes fail per entry on the device).
  if (pool.read_only() || operations == 0) return;
  uint64_t* counter = pool.at<uint64_t>(format::kWriteCounterOffset);
  __atomic_store_n(counter, *counter + operations, __ATOMIC_RELEASE);
  pool.persist(counter, sizeof *counter);
}

namespace {
// Writers held off: the attachment's writers first, then writing batches (searches go on); the
// same order as a writer's (Table::hold_snapshots, then a batch), so neither waits on the other
// while holding what the other needs.
class WritersHeldOff {
 public:
  WritersHeldOff(SnapshotGate* attachment_writers, std::shared_mutex& batches)
      : attachment_writers_(attachment_writers), batches_(batches) {
    lock();
  }
  ~WritersHeldOff() {
    if (held_) unlock();
  }
  void lock() {
    if (attachment_writers_) attachment_writers_->lock();
    batches_.lock_shared();
    held_ = true;
  }
  void unlock() {
    batches_.unlock_shared();
    if (attachment_writers_) attachment_writers_->unlock();
    held_ = false;
  }

 private:
  SnapshotGate* attachment_writers_;
  std::shared_mutex& batches_;
  bool held_ = false;
};
}  // namespace

Snapshotter::Snapshotter(pool::Pool& pool, std::shared_mutex& batches, FileSystem& fs,
                         std::function<void()> settle_writes, SnapshotGate* attachment_writers)
    : pool_(pool),
      batches_(batches),
      attachment_writers_(attachment_writers),
      fs_(fs),
      settle_writes_(std::move(settle_writes)) {
  std::shared_lock hold(batches_);
  const format::PoolHeader& h = pool_.header();
  if (h.snapshot_unix_ns != 0 && h.snapshot_writes == pool_writes(pool_)) {
    pool_record_ = PoolRecord{{}, h.snapshot_unix_ns, h.snapshot_writes};
    std::memcpy(pool_record_->chain_id, h.snapshot_chain_id, 16);
  }
}

bool Snapshotter::has_unsnapshotted_writes() const {
  std::shared_lock hold(batches_);
  const format::PoolHeader& h = pool_.header();
  return h.snapshot_unix_ns == 0 || pool_writes(pool_) != h.snapshot_writes;
}

void Snapshotter::remove_stale_temporaries(const std::string& path) {
  const std::string prefix = base_name(path) + kTempInfix, dir = parent_dir(path);
  for (const std::string& name : fs_.list_dir(dir)) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (pid <= 0 || *end != '-' || pid == getpid() || fs_.process_alive(pid)) continue;
    fs_.remove(dir + "/" + name);
  }
}

void Snapshotter::record_in_pool_header(const Superblock& committed) {
  if (pool_.read_only() || pool_.copy_on_write()) return;
  // Header writes are exclusive with the engines' own (resize, heap growth): a brief full hold.
  std::unique_lock hold(batches_);
  format::PoolHeader h = pool_.header();
  h.snapshot_unix_ns = committed.captured_unix_ns;
  h.snapshot_writes = committed.pool_writes;
  std::memcpy(h.snapshot_chain_id, committed.chain_id, 16);
  pool_.write_header(h);
}

SnapshotResult Snapshotter::take(const std::string& path, const TakeOptions& options) {
  if (path.empty()) throw Error(ErrorCode::kInvalidArgument, "a snapshot needs a file path", "path");
  std::lock_guard serial(taking_);
  const auto t0 = Clock::now();
  SnapshotResult result;
  result.path = path;
  if (options.skip_if_unchanged && !has_unsnapshotted_writes()) {
    result.skipped = true;
    return result;
  }
  remove_stale_temporaries(path);

  // What the file holds now. A damaged or foreign file is refused before anything changes.
  std::unique_ptr<File> existing;
  std::optional<Superblock> current;
  int current_copy = 0;
  if (fs_.exists(path)) {
    existing = fs_.open_write(path);
    current = read_superblock(*existing, path, &current_copy);
    // A file this object did not write last is checked whole (headers and indexes: data pages
    // are checked by a restore) before it is replaced or appended to.
    if (!baseline_ || baseline_->path != path || std::memcmp(&baseline_->superblock, &*current, sizeof(Superblock)) != 0)
      read_chain(*existing, path);
    if (std::memcmp(current->pool_uuid, pool_.header().uuid, 16) != 0)
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{} holds snapshots of another pool (uuid {}, this pool is {}): remove it or pick another "
                              "file",
                              path, hex(current->pool_uuid, 16), hex(pool_.header().uuid, 16)),
                  "path");
    if (!existing->try_lock())
      throw Error(ErrorCode::kPoolInUse, fmt::format("snapshot file {} is being written by another process", path));
  }
  const bool tracked = pool_.dirty_pages().engine_tracks_writes();
  const bool compaction_due =
      current && (current->segment_count >= options.max_segments ||
                  static_cast<double>(current->committed_end - kFirstSegmentOffset - current->base_bytes) >
                      options.compact_ratio * static_cast<double>(current->base_bytes));
  // A delta is only right on top of the very chain state the marks start from (see the header).
  const bool ours = current && baseline_ && baseline_->path == path &&
                    std::memcmp(&baseline_->superblock, &*current, sizeof(Superblock)) == 0;
  const bool pool_records_it = current && !baseline_ && pool_record_ &&
                               std::memcmp(pool_record_->chain_id, current->chain_id, 16) == 0 &&
                               pool_record_->pool_writes == current->pool_writes &&
                               pool_record_->captured_unix_ns == current->captured_unix_ns;
  const bool append = tracked && !compaction_due && (ours || pool_records_it);
  result.full = !append;
  // The header pages were written since (open, close, this record): they go in the delta.
  if (append && pool_records_it) pool_.dirty_pages().mark(0, format::kReservedPrefixBytes);

  std::unique_ptr<File> out;
  std::string temp_path;
  uint64_t segment_offset = kFirstSegmentOffset;
  if (append) {
    out = std::move(existing);
    segment_offset = current->committed_end;
    if (out->size() > segment_offset) out->truncate(segment_offset);  // the tail of a failed append
  } else {
    std::random_device rd;
    temp_path = fmt::format("{}{}{}-{:08x}", path, kTempInfix, getpid(), rd());
    out = fs_.create(temp_path, options.file_mode);
  }

  std::vector<uint64_t> first_marks, capture_marks;
  bool taken = false;
  Superblock sb{};
  try {
    SegmentBuilder segment(*out, segment_offset, !append);
    // Step 1.
    WritersHeldOff hold(attachment_writers_, batches_);
    auto held_since = Clock::now();
    if (settle_writes_) settle_writes_();
    const uint64_t first_pages = pool_.file_size() >> kPageShift;
    pool_.dirty_pages().take(first_pages, first_marks);
    taken = true;
    if (tracked) {
      hold.unlock();
      result.writers_held_seconds += seconds_since(held_since);
    }
    // Step 2 (untracked: still holding, so this is the capture itself).
    const std::byte* base = pool_.base();
    if (append)
      for_each_marked(first_marks, [&](uint64_t p) { segment.first_pass_page(p, base + p * kPageBytes); });
    else
      for (uint64_t p = 0; p < first_pages; ++p) segment.first_pass_page(p, base + p * kPageBytes);
    segment.flush();
    GPHASH_CRASH_POINT("snapshot.after_first_pass");
    // Step 3.
    if (tracked) {
      // Room for what was marked meanwhile and a margin for what gets marked before the hold.
      const uint64_t expected = pool_.dirty_pages().count(pool_.file_size() >> kPageShift);
      const size_t want = static_cast<size_t>((expected + expected / 4 + 64) * kPageBytes);
      if (capture_buffer_.size() < want) capture_buffer_.resize(want);
      hold.lock();
      held_since = Clock::now();
      if (settle_writes_) settle_writes_();
    }
    result.pool_bytes = pool_.file_size();
    result.pool_writes = options.captured_writes ? *options.captured_writes : pool_writes(pool_);
    result.captured_unix_ns = unix_ns_now();
    std::vector<uint64_t> captured_pages;
    if (tracked) {
      pool_.dirty_pages().take(result.pool_bytes >> kPageShift, capture_marks);
      for_each_marked(capture_marks, [&](uint64_t p) { captured_pages.push_back(p); });
      if (capture_buffer_.size() < captured_pages.size() * kPageBytes) capture_buffer_.resize(captured_pages.size() * kPageBytes);
      for (size_t i = 0; i < captured_pages.size(); ++i)
        std::memcpy(capture_buffer_.data() + i * kPageBytes, base + captured_pages[i] * kPageBytes, kPageBytes);
    }
    hold.unlock();
    result.writers_held_seconds += seconds_since(held_since);
    GPHASH_CRASH_POINT("snapshot.after_capture");
    // Step 4.
    for (size_t i = 0; i < captured_pages.size(); ++i)
      segment.capture_page(captured_pages[i], capture_buffer_.data() + i * kPageBytes);
    SegmentHeader h{};
    std::memcpy(h.magic, kSegmentMagic, sizeof h.magic);
    h.sequence = append ? current->segment_count : 0;
    h.kind = append ? kSegmentDelta : kSegmentBase;
    h.pool_bytes = result.pool_bytes;
    h.captured_unix_ns = result.captured_unix_ns;
    h.pool_writes = result.pool_writes;
    h.previous_checksum = append ? current->last_segment_checksum : 0;
    if (append) {
      sb = *current;
    } else {
      std::memcpy(sb.magic, kSnapshotMagic, sizeof sb.magic);
      sb.byte_order = kByteOrderMark;
      sb.version_major = kVersionMajor;
      sb.version_minor = kVersionMinor;
      sb.page_shift = kPageShift;
      std::random_device rd;
      for (auto& b : sb.chain_id) b = static_cast<unsigned char>(rd());
      std::memcpy(sb.pool_uuid, pool_.header().uuid, 16);
    }
    std::memcpy(h.chain_id, sb.chain_id, 16);
    h = segment.finish(h);
    GPHASH_CRASH_POINT("snapshot.after_segment_write");
    sb.segment_count = h.sequence + 1;
    sb.committed_end = segment_offset + h.segment_bytes;
    sb.last_segment_offset = segment_offset;
    sb.last_segment_checksum = h.checksum;
    sb.pool_bytes = h.pool_bytes;
    sb.captured_unix_ns = h.captured_unix_ns;
    sb.pool_writes = h.pool_writes;
    if (!append) sb.base_bytes = h.segment_bytes;
    result.sequence = h.sequence;
    result.pages_written = segment.data_pages();
    result.bytes_written = segment.bytes_written();
    if (append) {
      out->sync();  // the segment is durable before any superblock names it
      GPHASH_CRASH_POINT("snapshot.after_segment_sync");
      sb.generation = current->generation + 1;
      sb.checksum = checksum_of(sb);
      out->write_at(kSuperblockOffset[1 - current_copy], &sb, sizeof sb);
      GPHASH_CRASH_POINT("snapshot.after_superblock_write");
      out->sync();
    } else {
      sb.generation = 1;
      sb.checksum = checksum_of(sb);
      for (uint64_t at : kSuperblockOffset) out->write_at(at, &sb, sizeof sb);
      result.bytes_written += sizeof sb;
      out->sync();
      GPHASH_CRASH_POINT("snapshot.after_segment_sync");
      // The old file (if any) stays locked until its name points at the new one.
      fs_.rename(temp_path, path);
      temp_path.clear();
      GPHASH_CRASH_POINT("snapshot.after_rename");
      fs_.sync_dir(parent_dir(path));
    }
    result.bytes_written += sizeof sb;
    result.file_bytes = sb.committed_end;
  } catch (...) {
    // Nothing was committed (or, if the directory sync failed, maybe it was: start a new chain).
    baseline_.reset();
    if (taken) {
      pool_.dirty_pages().merge(first_marks.data(), first_marks.size());
      pool_.dirty_pages().merge(capture_marks.data(), capture_marks.size());
    }
    if (!temp_path.empty()) {
      out.reset();
      try {
        fs_.remove(temp_path);
      } catch (const Error&) {
        // Left for remove_stale_temporaries() of a later snapshot.
      }
    }
    throw;
  }
  GPHASH_CRASH_POINT("snapshot.after_commit");
  baseline_ = Baseline{path, sb};
  pool_record_.reset();  // the marks now start from this snapshot
  record_in_pool_header(sb);
  result.seconds = seconds_since(t0);
  return result;
}

}  // namespace gphash::snapshot

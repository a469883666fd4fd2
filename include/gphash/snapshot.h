// Snapshots of a pool to a file on a real file system: the explicit step that makes a table
// survive a reboot or a power cut (DESIGN.md section 3; README "What survives what").
//
// A snapshot is consistent: it is captured at a batch boundary, with writing batches held off
// while the pages that changed are copied into memory (searches keep running). It is durable when
// the call returns: the file and its directory are synced. It is crash-safe: a crash or power cut
// at any moment leaves the previous snapshot usable, never a mix of the two. It is incremental:
// only the pages changed since the previous snapshot to the same file are written, also by a new
// process when nobody wrote the pool after that snapshot (else it writes a full image); a long
// chain is compacted into a new full image now and then. The file format is in docs/FORMAT.md.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

namespace gphash {

// Keeps snapshots from splitting a step of several writes (Table::hold_snapshots): steps enter
// shared (lock_shared), a snapshot closes the gate (lock): steps that come later wait, and it goes
// on once those inside have left. Unlike std::shared_mutex, whose glibc version lets readers in
// ahead of a waiting writer, a snapshot is never starved by steps that follow each other at once.
class SnapshotGate {
 public:
  void lock_shared() {
    std::unique_lock l(m_);
    cv_.wait(l, [&] { return !closed_; });
    ++inside_;
  }
  void unlock_shared() {
    std::lock_guard l(m_);
    if (--inside_ == 0) cv_.notify_all();
  }
  void lock() {
    std::unique_lock l(m_);
    cv_.wait(l, [&] { return !closed_; });  // one snapshot at a time
    closed_ = true;
    cv_.wait(l, [&] { return inside_ == 0; });
  }
  void unlock() {
    std::lock_guard l(m_);
    closed_ = false;
    cv_.notify_all();
  }
  // A snapshot waits for the steps inside (or is being taken): a holder that keeps one step open
  // across many, as a pipelined gphash-server store does, finishes it and leaves when this is true.
  bool snapshot_waiting() {
    std::lock_guard l(m_);
    return closed_;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  uint64_t inside_ = 0;
  bool closed_ = false;
};

// Automatic snapshots of a table (OpenOptions::snapshots). With `path` set, Table::open of a pool
// that does not exist restores it from that file, and Table::snapshot() without a path writes
// there. With an interval, a background thread takes a snapshot every `every_seconds` seconds
// and after every `every_batches` writing batches (whichever comes first; a snapshot is skipped
// when nothing was written since the last one), and close() takes a last one.
struct SnapshotOptions {
  std::string path;             // a file on a real file system (not /dev/shm: it would not survive a reboot)
  double every_seconds = 0;     // 0: not by time
  uint64_t every_batches = 0;   // 0: not by count
  uint32_t file_mode = 0600;    // permissions of a snapshot file this table creates
};

struct SnapshotResult {
  std::string path;
  bool full = false;               // a whole image in a new file, not a delta appended to the chain
  uint64_t sequence = 0;           // the segment's number in the file's chain (0 for a full image)
  uint64_t pages_written = 0;      // 4 KiB pages of data written
  uint64_t bytes_written = 0;      // everything written to the file (headers and index too)
  uint64_t file_bytes = 0;         // the file's size afterwards
  uint64_t pool_bytes = 0;         // the pool's size at the capture
  uint64_t captured_unix_ns = 0;   // when the capture was taken
  uint64_t pool_writes = 0;        // the pool's write counter at the capture (TableInfo::writes)
  double seconds = 0;              // the whole call
  double writers_held_seconds = 0; // how long writing batches were held off
  bool skipped = false;            // automatic snapshots: nothing was written since the last one
};

struct RestoreOptions {
  bool replace = false;          // replace an existing pool at the path (refused while it is open)
  uint32_t pool_file_mode = 0600;
  int threads = 0;               // for the recovery pass of the first open (0: all)
};

struct RestoreResult {
  uint64_t items = 0;            // items of the restored table
  uint64_t pool_bytes = 0;
  uint64_t segments = 0;         // segments of the chain applied
  uint64_t pages_read = 0;       // 4 KiB data pages copied into the pool
  uint64_t captured_unix_ns = 0; // when the snapshot restored was captured
  uint64_t pool_writes = 0;      // the pool's write counter at that capture
  double seconds = 0;
};

}  // namespace gphash

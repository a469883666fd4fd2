// What the crash child tells its parent, over a pipe: a length-prefixed stream of records.
//
//   record = u32 payload_bytes, u32 type, payload   (native byte order: both ends are one machine)
//
// Records may exceed PIPE_BUF (a BEGIN of a 600-op batch is ~10 KB), so a write is not atomic and
// a SIGKILL can cut the last record short. The parser keeps only whole records and counts the
// torn tail. That is safe for the verdicts: the child writes BEGIN in full before it calls
// execute() and ACK only after execute() returned, so a torn BEGIN means the batch never started
// and a torn ACK means the batch stays "in flight" (the weaker claim).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "crash_workload.h"
#include "gphash/ops.h"

namespace gphash::crashtest {

enum class RecordType : uint32_t {
  kOpening = 1,  // about to open (or create) the pool: recovery may run next
  kOpened = 2,   // open returned
  kBegin = 3,    // a batch is about to run: its id and ops
  kAck = 4,      // execute() returned: statuses, and the versions searches read
  kDone = 5,     // the child closed the pool and exits (only with --max-batches)
  kError = 6,    // the child failed (an exception); the message follows
};

struct OpenedRecord {
  bool recovered = false;
  double open_seconds = 0;
  uint64_t items = 0;
  std::vector<uint64_t> hits;  // crash-point hit counts when open returned (GPHASH_CRASH_COUNT=1)
};

struct BeginRecord {
  uint64_t batch = 0;
  std::vector<PlannedOp> ops;
};

struct AckRecord {
  uint64_t batch = 0;
  std::vector<OpStatus> status;
  std::vector<uint64_t> seen;  // per op: the version a successful search read (kTorn if it failed its check)
};

// Everything a child reported, in order.
struct ChildReport {
  bool opening = false;
  bool opened = false;
  OpenedRecord open;
  std::vector<BeginRecord> begins;
  std::vector<AckRecord> acks;
  bool done = false;
  std::vector<uint64_t> done_hits;  // crash-point hit counts at exit
  std::string error;
  size_t torn_tail_bytes = 0;  // bytes of a record cut short by the kill
};

// Child side. Each record goes out with one write() loop; errors end the process (the parent is gone).
class ReportWriter {
 public:
  explicit ReportWriter(int fd) : fd_(fd) {}
  void opening();
  void opened(const OpenedRecord& r);
  void begin(uint64_t batch, const std::vector<PlannedOp>& ops);
  void ack(uint64_t batch, const std::vector<OpStatus>& status, const std::vector<uint64_t>& seen);
  void done(const std::vector<uint64_t>& hits);
  void error(const std::string& message);

 private:
  void send(RecordType type, const std::vector<std::byte>& payload);
  int fd_;
};

// Parent side: feed bytes as they arrive, in any pieces.
class ReportParser {
 public:
  void feed(const void* data, size_t bytes);
  // Call at end of stream: what is left is a torn record.
  void finish() { report_.torn_tail_bytes = pending_.size(); }
  const ChildReport& report() const { return report_; }

 private:
  void parse(RecordType type, const std::byte* p, size_t n);
  std::vector<std::byte> pending_;
  ChildReport report_;
};

}  // namespace gphash::crashtest

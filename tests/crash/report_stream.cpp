#include "report_stream.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace gphash::crashtest {
namespace {

template <class T>
void put(std::vector<std::byte>& out, const T& v) {
  const size_t at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}

void put_counts(std::vector<std::byte>& out, const std::vector<uint64_t>& counts) {
  put(out, static_cast<uint32_t>(counts.size()));
  for (uint64_t c : counts) put(out, c);
}

// Reads from a whole record's payload; a malformed payload is a harness bug, so it throws.
class Reader {
 public:
  Reader(const std::byte* p, size_t n) : p_(p), end_(p + n) {}
  template <class T>
  T get() {
    if (static_cast<size_t>(end_ - p_) < sizeof(T)) throw std::runtime_error("crash child report: short record");
    T v;
    std::memcpy(&v, p_, sizeof v);
    p_ += sizeof v;
    return v;
  }
  std::vector<uint64_t> counts() {
    std::vector<uint64_t> c(get<uint32_t>());
    for (uint64_t& x : c) x = get<uint64_t>();
    return c;
  }
  std::string rest() { return std::string(reinterpret_cast<const char*>(p_), static_cast<size_t>(end_ - p_)); }

 private:
  const std::byte* p_;
  const std::byte* end_;
};

}  // namespace

void ReportWriter::send(RecordType type, const std::vector<std::byte>& payload) {
  std::vector<std::byte> record;
  record.reserve(8 + payload.size());
  put(record, static_cast<uint32_t>(payload.size()));
  put(record, static_cast<uint32_t>(type));
  record.insert(record.end(), payload.begin(), payload.end());
  size_t done = 0;
  while (done < record.size()) {
    ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) std::_Exit(3);  // the parent went away: nobody is left to report to
    done += static_cast<size_t>(n);
  }
}

void ReportWriter::opening() { send(RecordType::kOpening, {}); }

void ReportWriter::opened(const OpenedRecord& r) {
  std::vector<std::byte> p;
  put(p, static_cast<uint8_t>(r.recovered));
  put(p, r.open_seconds);
  put(p, r.items);
  put_counts(p, r.hits);
  send(RecordType::kOpened, p);
}

void ReportWriter::begin(uint64_t batch, const std::vector<PlannedOp>& ops) {
  std::vector<std::byte> p;
  p.reserve(12 + ops.size() * 17);
  put(p, batch);
  put(p, static_cast<uint32_t>(ops.size()));
  for (const PlannedOp& op : ops) {
    put(p, op.record);
    put(p, static_cast<uint8_t>(op.op));
    put(p, op.version);
  }
  send(RecordType::kBegin, p);
}

void ReportWriter::ack(uint64_t batch, const std::vector<OpStatus>& status, const std::vector<uint64_t>& seen) {
  std::vector<std::byte> p;
  p.reserve(12 + status.size() * 9);
  put(p, batch);
  put(p, static_cast<uint32_t>(status.size()));
  for (size_t i = 0; i < status.size(); ++i) {
    put(p, static_cast<uint8_t>(status[i]));
    put(p, seen[i]);
  }
  send(RecordType::kAck, p);
}

void ReportWriter::done(const std::vector<uint64_t>& hits) {
  std::vector<std::byte> p;
  put_counts(p, hits);
  send(RecordType::kDone, p);
}

void ReportWriter::error(const std::string& message) {
  std::vector<std::byte> p(message.size());
  std::memcpy(p.data(), message.data(), message.size());
  send(RecordType::kError, p);
}

void ReportParser::feed(const void* data, size_t bytes) {
  const auto* in = static_cast<const std::byte*>(data);
  pending_.insert(pending_.end(), in, in + bytes);
  size_t at = 0;
  while (pending_.size() - at >= 8) {
    uint32_t len, type;
    std::memcpy(&len, pending_.data() + at, 4);
    std::memcpy(&type, pending_.data() + at + 4, 4);
    if (pending_.size() - at - 8 < len) break;
    parse(static_cast<RecordType>(type), pending_.data() + at + 8, len);
    at += 8 + len;
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(at));
}

void ReportParser::parse(RecordType type, const std::byte* p, size_t n) {
  Reader r(p, n);
  switch (type) {
    case RecordType::kOpening:
      report_.opening = true;
      break;
    case RecordType::kOpened:
      report_.opened = true;
      report_.open.recovered = r.get<uint8_t>() != 0;
      report_.open.open_seconds = r.get<double>();
      report_.open.items = r.get<uint64_t>();
      report_.open.hits = r.counts();
      break;
    case RecordType::kBegin: {
      BeginRecord b;
      b.batch = r.get<uint64_t>();
      b.ops.resize(r.get<uint32_t>());
      for (PlannedOp& op : b.ops) {
        op.record = r.get<uint64_t>();
        op.op = static_cast<Op>(r.get<uint8_t>());
        op.version = r.get<uint64_t>();
      }
      report_.begins.push_back(std::move(b));
      break;
    }
    case RecordType::kAck: {
      AckRecord a;
      a.batch = r.get<uint64_t>();
      const uint32_t count = r.get<uint32_t>();
      a.status.resize(count);
      a.seen.resize(count);
      for (uint32_t i = 0; i < count; ++i) {
        a.status[i] = static_cast<OpStatus>(r.get<uint8_t>());
        a.seen[i] = r.get<uint64_t>();
      }
      report_.acks.push_back(std::move(a));
      break;
    }
    case RecordType::kDone:
      report_.done = true;
      report_.done_hits = r.counts();
      break;
    case RecordType::kError:
      report_.error = r.rest();
      break;
    default:
      throw std::runtime_error("crash child report: unknown record type " +
                               std::to_string(static_cast<uint32_t>(type)));
  }
}

}  // namespace gphash::crashtest

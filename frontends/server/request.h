// A parsed request: one command line (and its data block), the key-value commands it becomes,
// and how to reply. A connection keeps its requests in arrival order and replies in that order.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kv/command.h"

namespace gphash::server {

enum class Verb : uint8_t {
  kReply,    // answered at parse time: `reply` holds the bytes (errors, version, verbosity...)
  kGet, kGets, kGat, kGats,
  kSet, kAdd, kReplace, kAppend, kPrepend, kCas,
  kDelete, kIncr, kDecr, kTouch, kFlushAll,
  kStats,    // answered by the connection's thread from the counters (`stats_args`)
  kQuit,     // close after the replies before it
  kMetaGet, kMetaSet, kMetaDelete, kMetaArith,
  kMetaNoop, // mn: "MN", in order
};

// The return flags of a meta command, echoed in request order (memcached does the same).
struct MetaFlag {
  char flag;
  std::string_view token;  // O: its token; k: the key as sent when base64 (b), else empty; others are computed
};

struct Request {
  Verb verb = Verb::kReply;
  bool noreply = false;          // text: noreply; meta: q (suppresses the common answer)
  bool close_after = false;      // the connection closes once this reply is sent
  std::string bytes;             // the request's own copy of its line and data (keys point here)
  std::string decoded_key;       // meta b: the key, decoded from base64
  std::string reply;             // kReply: the answer (may be empty: suppressed by noreply)
  std::vector<kv::KvCommand> cmds;  // one per key (none for kReply, kStats, kQuit, kMetaNoop)
  std::vector<MetaFlag> meta;    // meta commands: the flags to echo
  bool meta_value = false;       // mg/ma v: return the value
  std::string_view stats_args;   // kStats
  std::atomic<bool> done{false};  // the results are in: the reply can be built
  // Partitions (schedulers) still working on this request's commands; the last one to finish
  // its share sets `done` and hands the request back to its worker (leaving 1 behind: it is the
  // only one still to read the count).
  std::atomic<uint16_t> parts_left{0};
  bool needs_store() const { return !cmds.empty(); }
  // Back to a fresh request, keeping the buffers' memory (a worker reuses answered requests).
  void reset() {
    verb = Verb::kReply;
    noreply = close_after = meta_value = false;
    bytes.clear();
    decoded_key.clear();
    reply.clear();
    cmds.clear();
    meta.clear();
    stats_args = {};
    done.store(false, std::memory_order_relaxed);
    parts_left.store(0, std::memory_order_relaxed);
  }
  // Memory the request holds while queued (counted against the connection's buffer limit).
  size_t footprint() const { return sizeof(Request) + bytes.capacity() + cmds.capacity() * sizeof(kv::KvCommand) + meta.capacity() * sizeof(MetaFlag); }
};

}  // namespace gphash::server

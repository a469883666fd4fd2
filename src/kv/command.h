// One key's operation in a round, and its result: what the server hands the key-value layer.
//
// The server turns each protocol request into one KvCommand per key (a multi-get of 100 keys is
// 100 commands) and the store fills in the result fields. memcached's semantics live here, in
// one place, for the text and the meta commands alike.
#pragma once

#include <cstdint>
#include <string_view>

#include "kv/item_store.h"

namespace gphash::kv {

enum class KvOp : uint8_t {
  kGet,       // get, gets, gat, gats, mg
  kStore,     // set, add, replace, append, prepend, cas, ms
  kDelete,    // delete, md
  kArith,     // incr, decr, ma
  kTouch,     // touch
  kFlushAll,  // flush_all (no key)
};

enum class StoreMode : uint8_t { kSet, kAdd, kReplace, kAppend, kPrepend };

enum class KvStatus : uint8_t {
  kOk,           // get: hit; store: STORED; delete: DELETED; arith: the new value; touch: TOUCHED
  kNotFound,     // get: miss; NOT_FOUND
  kNotStored,    // add of a present key, replace/append/prepend of an absent one
  kExists,       // compare-and-swap value differs
  kNonNumeric,   // incr/decr of a value that is not a decimal number
  kOutOfMemory,  // SERVER_ERROR out of memory storing object
  kTooLarge,     // the stored result would exceed the largest item (append, prepend)
};

struct KvCommand {
  KvOp op = KvOp::kGet;
  StoreMode mode = StoreMode::kSet;
  std::string_view key;
  std::string_view value;      // kStore
  uint32_t client_flags = 0;   // kStore
  int64_t exptime = 0;         // kStore, kTouch, and kGet/kArith with set_exptime: memcached's
                               // encoding (0 never, <= 30 days relative, else absolute, < 0 gone)
  bool set_exptime = false;    // kGet (gat, mg T), kArith (ma T)
  uint64_t compare_cas = 0;    // kStore (cas, ms C), kDelete and kArith (C); 0: no comparison
  bool has_compare_cas = false;
  uint64_t explicit_cas = 0;   // meta E: the cas value to give the new item (0: the next one)
  uint64_t delta = 1;          // kArith
  bool decrement = false;      // kArith
  bool vivify = false;         // kGet (mg N) / kArith (ma N): create on a miss
  int64_t vivify_exptime = 0;
  uint64_t initial = 0;        // kArith (ma J): the value a vivified counter starts at
  bool want_value = true;      // kGet: the reply needs the value (hold the item)
  bool bump = true;            // kGet: count as an access (meta u clears it)
  uint32_t flush_delay = 0;    // kFlushAll (seconds; 0 = now)
  uint16_t partition = 0;      // the server's: which of its stores runs this command (by key hash)

  // Results.
  KvStatus status = KvStatus::kNotFound;
  Location item = 0;      // kGet hit with want_value: the item, held until release()
  uint64_t cas = 0;       // the item's cas (after the operation)
  uint32_t flags = 0;     // the item's client flags
  uint32_t value_len = 0;
  int64_t ttl = -1;       // seconds left; -1: never expires
  uint64_t number = 0;    // kArith: the new value
  bool vivified = false;  // mg/ma N: this command created the item (meta W)
  bool token_sent = false;  // mg: another client already won the right to recompute (meta Z)
  bool hit_before = false;       // mg h
  uint32_t last_access_ago = 0;  // mg l
  // Final: set when the round is resolved if the command neither changed a signature's head nor
  // read one that an unwritten change touches (nothing it reports waits on the index), otherwise
  // once the batch carrying the changes it depends on is done: its round's, or for a read of a
  // head from changes on their way (pipelined), theirs (KvStore::resolve_round).
  bool settled = false;
};

}  // namespace gphash::kv

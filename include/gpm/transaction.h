// libGPM's transaction API for kernels: begin, log a write, commit. One protocol, written once for
// device and host code over a memory policy, so CPU tests run exactly the code kernels run
// (tests/gpm_log_test.cpp drives it with a memory that loses stores at a simulated crash).
//
//   gpm::Transaction<4> tx = gpm::begin<4>(log, slot, k);  // slot: this thread's index in the launch,
//   tx.write(&table[i].key, key);                           //   k: its k-th transaction in the launch
//   tx.write(&table[i].value, value);                       // buffered: the pool is untouched so far
//   bool ok = gpm::commit(log, writes, tx);                 // logged, applied, durable; false: the log is full
//
// commit, undo log: the old values as entries; persist barrier; the new values in place; persist
//   barrier; the slot's state word = (seq, DONE); persist barrier.
// commit, redo log: the new values as entries; persist barrier; state = (seq, COMMITTED); persist
//   barrier; the new values in place; persist barrier; state = (seq, DONE); persist barrier.
// Recovery (GpmPool::recover) undoes an undo transaction whose entries carry a seq above its slot's
// state, replays a COMMITTED redo transaction, and drops a redo transaction that never committed: each
// transaction is wholly done or wholly undone. Transactions that run at the same time must write
// disjoint words (as in the paper's gpKVS: a bucket slot belongs to one thread of a batch).
//
// Memory policy `Mem`: store(uint64_t*, uint64_t), load(const uint64_t*), barrier(), and
// reserve(unsigned long long* counter, uint32_t n) -> the counter's old value (an atomic add).
// On the GPU it is gpm::DeviceMemory (gpm/device.h) over gpm::DeviceWrites.
#pragma once

#include <cstdint>

#include "format/gpm/log.h"
#include "format/hd.h"

namespace gphash::gpm {

// A log as kernels see it: trivially copyable, passed by value (gpm::DeviceLog::view()).
struct LogView {
  uint64_t* state;      // one word per slot
  uint64_t* entries;    // entry words (format/gpm/log.h)
  uintptr_t pool_base;  // the address of pool offset 0 (device and host addresses agree)
  uint32_t layout;      // format::gpm::LogLayout
  uint32_t mode;        // format::gpm::LogMode
  uint64_t slots;
  uint32_t entries_per_slot;
  uint32_t partition_threads;
  uint64_t partition_entries;
  uint64_t epoch;                // this launch's (GpmPool::begin_launch)
  unsigned long long* tails;     // conventional: one append counter per partition (GPU memory)
  unsigned int* full;            // set to 1 when a conventional partition had no room
};

template <int N>
struct Transaction {
  static_assert(N >= 1 && N <= static_cast<int>(format::gpm::kMaxTxEntries), "a transaction writes 1..255 words");
  uint64_t slot = 0;
  uint64_t seq = 0;
  uint32_t count = 0;
  bool too_many = false;  // more than N writes (or than the log's entries_per_slot): commit refuses
  uint64_t* addr[N];
  uint64_t value[N];

  // Logs a write of `v` to the pool word at `p` (8-byte aligned, inside a region).
  GPHASH_HD void write(uint64_t* p, uint64_t v) {
    if (count < N) {
      addr[count] = p;
      value[count] = v;
      ++count;
    } else {
      too_many = true;
    }
  }
};

template <int N>
GPHASH_HD Transaction<N> begin(const LogView& log, uint64_t slot, uint64_t k) {
  Transaction<N> tx;
  tx.slot = slot;
  tx.seq = format::gpm::make_seq(log.epoch, k);
  return tx;
}

// Where word w of the transaction's entry i goes (HCL), given the partition entry `first` it
// reserved (conventional).
GPHASH_HD uint64_t* entry_word(const LogView& log, uint64_t slot, uint64_t first, uint32_t i, uint32_t w) {
  namespace fg = format::gpm;
  if (log.layout == fg::kLayoutHcl) return log.entries + fg::hcl_word(slot, log.entries_per_slot, i, w);
  return log.entries + fg::conventional_word(slot / log.partition_threads, log.partition_entries, first + i, w);
}

template <class Mem, int N>
GPHASH_HD bool commit(const LogView& log, const Mem& mem, Transaction<N>& tx) {
  namespace fg = format::gpm;
  if (tx.too_many || tx.count > log.entries_per_slot || tx.slot >= log.slots) return false;
  if (tx.count == 0) return true;
  const bool hcl = log.layout == fg::kLayoutHcl;
  const uint32_t owner = static_cast<uint32_t>(tx.slot % log.partition_threads);
  uint64_t first = 0;
  if (!hcl) {
    first = mem.reserve(&log.tails[tx.slot / log.partition_threads], tx.count);
    if (first + tx.count > log.partition_entries) {
      *log.full = 1;
      return false;
    }
  }
  const bool undo = log.mode == fg::kModeUndo;
  for (uint32_t i = 0; i < tx.count; ++i) {
    const uint64_t offset = reinterpret_cast<uintptr_t>(tx.addr[i]) - log.pool_base;
    const uint64_t v = undo ? mem.load(tx.addr[i]) : tx.value[i];
    const uint64_t tag = fg::make_tag(tx.seq, i, owner);
    const uint64_t words[fg::kEntryWords] = {offset, v, tag, fg::entry_check(offset, v, tag, tx.slot)};
    for (uint32_t w = 0; w < fg::kEntryWords; ++w) mem.store(entry_word(log, tx.slot, first, i, w), words[w]);
  }
  mem.barrier();  // the log is durable before anything changes in place
  if (!undo) {
    mem.store(&log.state[tx.slot], fg::make_state(tx.seq, tx.count, fg::kPhaseCommitted));
    mem.barrier();  // redo: the commit record is durable before the in-place writes
  }
  for (uint32_t i = 0; i < tx.count; ++i) mem.store(tx.addr[i], tx.value[i]);
  mem.barrier();  // the in-place writes are durable before the log lets go of them
  mem.store(&log.state[tx.slot], fg::make_state(tx.seq, tx.count, fg::kPhaseDone));
  mem.barrier();  // DONE is durable before this slot's next transaction overwrites its entries
  return true;
}

}  // namespace gphash::gpm

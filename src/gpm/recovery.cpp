// Recovery of a GPM log on the CPU (the protocol is in gpm/transaction.h, the format in
// format/gpm/log.h). Per slot: entries whose check holds and whose sequence is above the slot's
// state belong to an unfinished transaction; an undo log restores their old values (newest entry
// first), a redo log drops them; a redo transaction whose state says COMMITTED is replayed from
// its entries, which must all be there. Then the slot's state says DONE at the newest sequence
// seen, so the same entries are never acted on again. Writes go first, the state after, each
// persisted: a crash during recovery leaves a log that recovers the same way.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "gphash/error.h"
#include "gpm/gpm.h"

namespace gphash::gpm {

namespace fg = format::gpm;

namespace {

struct Found {
  uint64_t seq;
  uint32_t index;
  uint64_t offset;
  uint64_t value;
};

uint64_t load(const uint64_t* p) { return *reinterpret_cast<const volatile uint64_t*>(p); }

}  // namespace

RecoveryReport GpmPool::recover(const LogInfo& log) {
  if (pool_->read_only()) throw Error(ErrorCode::kReadOnly, fmt::format("pool {} is open read-only: cannot recover", pool_->path()));
  const fg::LogHeader& lh = log.header;
  uint64_t* state = log_state(log);
  const uint64_t* entries = log_entries(log);
  const bool hcl = lh.layout == kLayoutHcl;
  const bool undo = lh.mode == kModeUndo;
  RecoveryReport report;

  // Valid entries of each slot.
  std::vector<std::vector<Found>> by_slot(lh.slots);
  auto consider = [&](uint64_t slot, const uint64_t* w0, const uint64_t* w1, const uint64_t* w2, const uint64_t* w3) {
    const uint64_t offset = load(w0), value = load(w1), tag = load(w2), check = load(w3);
    if (offset == 0 && value == 0 && tag == 0 && check == 0) return;  // never written
    const uint64_t seq = fg::tag_seq(tag);
    if (check != fg::entry_check(offset, value, tag, slot)) {
      if (seq > fg::state_seq(load(&state[slot]))) ++report.torn_entries;
      return;
    }
    by_slot[slot].push_back({seq, fg::tag_index(tag), offset, value});
  };
  if (hcl) {
    for (uint64_t s = 0; s < lh.slots; ++s)
      for (uint32_t i = 0; i < lh.entries_per_slot; ++i) {
        auto at = [&](uint32_t w) { return entries + fg::hcl_word(s, lh.entries_per_slot, i, w); };
        consider(s, at(0), at(1), at(2), at(3));
      }
  } else {
    const uint64_t partitions = lh.slots / lh.partition_threads;
    for (uint64_t p = 0; p < partitions; ++p)
      for (uint64_t e = 0; e < lh.partition_entries; ++e) {
        auto at = [&](uint32_t w) { return entries + fg::conventional_word(p, lh.partition_entries, e, w); };
        const uint32_t owner = fg::tag_owner(load(at(2)));
        // A torn tag may name a thread past the partition: such an entry cannot be anyone's.
        const uint64_t slot = p * lh.partition_threads + std::min<uint32_t>(owner, lh.partition_threads - 1);
        consider(slot, at(0), at(1), at(2), at(3));
      }
  }

  auto write_back = [&](const Found& f, uint64_t slot) {
    if (!in_region(f.offset))
      throw Error(ErrorCode::kCorruptTable,
                  fmt::format("log \"{}\": slot {} has an entry for pool offset {}, which is in no region", log.name, slot,
                              f.offset),
                  log.name);
    auto* word = pool_->at<uint64_t>(f.offset);
    *reinterpret_cast<volatile uint64_t*>(word) = f.value;
    pool_->persist(word, 8);
  };

  for (uint64_t s = 0; s < lh.slots; ++s) {
    const uint64_t st = load(&state[s]);
    const uint64_t sseq = fg::state_seq(st);
    std::vector<Found>& found = by_slot[s];
    uint64_t newest = sseq;
    uint32_t new_count = fg::state_count(st);
    bool changed = false;
    if (!undo && fg::state_phase(st) == fg::kPhaseCommitted) {
      // Committed, maybe not applied: every entry of it was persisted before the commit record.
      const uint32_t count = fg::state_count(st);
      std::vector<const Found*> ordered(count, nullptr);
      for (const Found& f : found)
        if (f.seq == sseq && f.index < count) ordered[f.index] = &f;
      for (uint32_t i = 0; i < count; ++i) {
        if (!ordered[i])
          throw Error(ErrorCode::kCorruptTable,
                      fmt::format("log \"{}\": committed transaction of slot {} lacks its entry {} of {}", log.name, s, i,
                                  count),
                      log.name);
        write_back(*ordered[i], s);
      }
      ++report.replayed;
      report.redone_writes += count;
      changed = true;
    }
    std::vector<Found> pending;
    for (const Found& f : found)
      if (f.seq > sseq) pending.push_back(f);
    if (!pending.empty()) {
      std::sort(pending.begin(), pending.end(), [](const Found& a, const Found& b) {
        return a.seq != b.seq ? a.seq > b.seq : a.index > b.index;  // newest transaction, last entry first
      });
      uint64_t transactions = 0, last_seq = 0;
      for (const Found& f : pending) {
        if (f.seq != last_seq) ++transactions;
        last_seq = f.seq;
        newest = std::max(newest, f.seq);
        if (undo) {
          write_back(f, s);
          ++report.undone_writes;
        }
      }
      (undo ? report.rolled_back : report.discarded) += transactions;
      new_count = 0;
      changed = true;
    }
    if (changed) {
      state[s] = fg::make_state(newest, new_count, fg::kPhaseDone);
      pool_->persist(&state[s], 8);
    }
  }
  pool_->sync();
  return report;
}

}  // namespace gphash::gpm

// libGPM on the CPU (runs in CI): the GPM pool's directory and its typed errors, the log protocol
// (gpm/transaction.h, the very code kernels run) driven by a memory that crashes after N stores and
// persists a random part of what was stored since the last barrier, recovery of every layout and
// mode (torn entries, entries of earlier launches, idempotence), and checkpoint restore.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "format/header.h"
#include "gphash/error.h"
#include "gpm/gpm.h"
#include "gpm/transaction.h"
#include "test_util.h"

namespace gphash {
namespace {

namespace fg = format::gpm;
using gpm::GpmPool;
using testing::TempPool;

// Stores land in program order until `budget` stores were made; at that moment the process
// "dies": a random subset of the stores since the last barrier reaches memory (a barrier orders,
// it does not make stores atomic), and nothing after.
struct CrashingMemory {
  mutable int64_t budget = -1;  // -1: never crash
  mutable std::vector<std::pair<uint64_t*, uint64_t>> pending;
  mutable std::mt19937_64* rng = nullptr;
  mutable bool crashed = false;

  void store(uint64_t* p, uint64_t v) const {
    if (crashed) return;
    if (budget == 0) {
      crash();
      return;
    }
    if (budget > 0) --budget;
    pending.push_back({p, v});
  }
  uint64_t load(const uint64_t* p) const {
    for (auto it = pending.rbegin(); it != pending.rend(); ++it)
      if (it->first == p) return it->second;
    return *p;
  }
  void barrier() const {
    if (crashed) return;
    if (budget == 0) {  // the process dies just before the fence
      crash();
      return;
    }
    for (auto& [p, v] : pending) *p = v;
    pending.clear();
  }
  unsigned long long reserve(unsigned long long* counter, uint32_t n) const {
    const unsigned long long old = *counter;
    *counter += n;
    return old;
  }
  void crash() const {
    crashed = true;
    for (auto& [p, v] : pending)
      if ((*rng)() & 1) *p = v;
    pending.clear();
  }
};

gpm::LogView view_of(GpmPool& gp, const gpm::LogInfo& log, uint64_t epoch, std::vector<unsigned long long>& tails,
                     unsigned int& full) {
  const fg::LogHeader& h = log.header;
  tails.assign(h.slots / h.partition_threads, 0);
  return {gp.log_state(log), gp.log_entries(log), reinterpret_cast<uintptr_t>(gp.pool().base()), h.layout, h.mode,
          h.slots, h.entries_per_slot, h.partition_threads, h.partition_entries, epoch, tails.data(), &full};
}

struct LogCase {
  const char* name;
  fg::LogLayout layout;
  fg::LogMode mode;
};
class GpmLogCrash : public ::testing::TestWithParam<LogCase> {};

// Each slot owns kWordsPerSlot words of the region (transactions in flight together write disjoint
// words) and runs transactions of 1..4 writes. Every slot crashes at its own random store, as if all
// were in flight when the process died; after recovery each slot's words must be exactly the state
// before its transaction in flight or exactly the state after it. Then the next launch runs on the
// recovered log, so entries of earlier launches are in the way.
TEST_P(GpmLogCrash, EveryTransactionIsWhollyDoneOrWhollyUndone) {
  const LogCase c = GetParam();
  constexpr uint64_t kSlots = 64, kWordsPerSlot = 6;
  TempPool path("gpmlog");
  std::mt19937_64 rng(1234 + c.layout * 10 + c.mode);
  auto gp = GpmPool::create(path.path());
  const gpm::Region region = gp->create_region("data", kSlots * kWordsPerSlot * 8);
  gpm::LogOptions o;
  o.layout = c.layout;
  o.mode = c.mode;
  o.slots = kSlots;
  o.entries_per_slot = 4;
  o.partition_threads = 16;
  o.partition_entries = 16 * 4 * 12;  // room for 12 transactions per thread and launch
  gpm::LogInfo log = gp->create_log("log", o);
  auto* words = reinterpret_cast<uint64_t*>(region.host);
  std::vector<uint64_t> model(kSlots * kWordsPerSlot, 0);
  uint64_t trials = 0, crashed_mid = 0;
  gpm::RecoveryReport total;
  for (int launch = 0; launch < 60; ++launch) {
    const uint64_t epoch = gp->begin_launch(log);
    std::vector<unsigned long long> tails;
    unsigned int full = 0;
    const gpm::LogView view = view_of(*gp, log, epoch, tails, full);
    std::vector<uint64_t> before = model, after = model;  // per slot: before/after its transaction in flight
    for (uint64_t s = 0; s < kSlots; ++s) {
      CrashingMemory mem;
      mem.rng = &rng;
      mem.budget = static_cast<int64_t>(rng() % 120);  // a transaction makes 4 * n + n + 2..3 stores
      const int transactions = 1 + static_cast<int>(rng() % 10);
      for (int k = 0; k < transactions && !mem.crashed; ++k) {
        auto tx = gpm::begin<4>(view, s, static_cast<uint64_t>(k));
        const uint32_t n = 1 + static_cast<uint32_t>(rng() % 4);
        std::vector<uint64_t> next(model.begin() + static_cast<long>(s * kWordsPerSlot),
                                   model.begin() + static_cast<long>((s + 1) * kWordsPerSlot));
        for (uint32_t i = 0; i < n; ++i) {
          const uint64_t w = rng() % kWordsPerSlot;  // repeats allowed: a transaction may write a word twice
          const uint64_t v = rng();
          tx.write(&words[s * kWordsPerSlot + w], v);
          next[w] = v;
        }
        for (uint64_t w = 0; w < kWordsPerSlot; ++w) before[s * kWordsPerSlot + w] = model[s * kWordsPerSlot + w];
        const bool ok = gpm::commit(view, mem, tx);
        ASSERT_TRUE(ok || mem.crashed);
        for (uint64_t w = 0; w < kWordsPerSlot; ++w) after[s * kWordsPerSlot + w] = next[w];
        if (!mem.crashed) std::copy(next.begin(), next.end(), model.begin() + static_cast<long>(s * kWordsPerSlot));
        ++trials;
      }
      if (mem.crashed) {
        ++crashed_mid;
      } else {
        for (uint64_t w = 0; w < kWordsPerSlot; ++w) before[s * kWordsPerSlot + w] = after[s * kWordsPerSlot + w] = model[s * kWordsPerSlot + w];
      }
    }
    ASSERT_EQ(full, 0u);
    // Reopen (recovery runs at open), then check every slot against before/after.
    gp.reset();
    gp = GpmPool::open(path.path());
    ASSERT_EQ(gp->recovery_reports().size(), 1u);
    const gpm::RecoveryReport& r = gp->recovery_reports()[0].second;
    total.rolled_back += r.rolled_back;
    total.replayed += r.replayed;
    total.discarded += r.discarded;
    total.torn_entries += r.torn_entries;
    words = reinterpret_cast<uint64_t*>(gp->region("data").host);
    log = gp->log("log");
    for (uint64_t s = 0; s < kSlots; ++s) {
      bool is_before = true, is_after = true;
      for (uint64_t w = 0; w < kWordsPerSlot; ++w) {
        is_before &= words[s * kWordsPerSlot + w] == before[s * kWordsPerSlot + w];
        is_after &= words[s * kWordsPerSlot + w] == after[s * kWordsPerSlot + w];
      }
      ASSERT_TRUE(is_before || is_after) << c.name << ": launch " << launch << " slot " << s << " is half done";
      for (uint64_t w = 0; w < kWordsPerSlot; ++w) model[s * kWordsPerSlot + w] = words[s * kWordsPerSlot + w];
    }
    // Recovery again changes nothing.
    const std::vector<uint64_t> snapshot(words, words + model.size());
    const gpm::RecoveryReport again = gp->recover(log);
    EXPECT_EQ(again.rolled_back + again.replayed + again.discarded, 0u);
    ASSERT_TRUE(std::equal(snapshot.begin(), snapshot.end(), words));
  }
  EXPECT_GT(crashed_mid, 1000u);
  if (c.mode == fg::kModeUndo) {
    EXPECT_GT(total.rolled_back, 100u);
  } else {
    EXPECT_GT(total.replayed, 10u);
    EXPECT_GT(total.discarded, 100u);
  }
  EXPECT_GT(total.torn_entries, 0u);
  std::printf("%s: %llu transactions, %llu crashed in flight; recovery rolled back %llu, replayed %llu, discarded %llu, "
              "saw %llu torn entries\n",
              c.name, (unsigned long long)trials, (unsigned long long)crashed_mid, (unsigned long long)total.rolled_back,
              (unsigned long long)total.replayed, (unsigned long long)total.discarded,
              (unsigned long long)total.torn_entries);
}

INSTANTIATE_TEST_SUITE_P(Layouts, GpmLogCrash,
                         ::testing::Values(LogCase{"hcl_undo", fg::kLayoutHcl, fg::kModeUndo},
                                           LogCase{"hcl_redo", fg::kLayoutHcl, fg::kModeRedo},
                                           LogCase{"conventional_undo", fg::kLayoutConventional, fg::kModeUndo},
                                           LogCase{"conventional_redo", fg::kLayoutConventional, fg::kModeRedo}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(GpmLogFormat, AWarpWritesEachEntryWordAsWhole128ByteLines) {
  for (uint32_t i = 0; i < 3; ++i)
    for (uint32_t w = 0; w < fg::kEntryWords; ++w) {
      const uint64_t first = fg::hcl_word(64, 3, i, w);  // warp 2, lane 0
      EXPECT_EQ(first * 8 % 128, 0u);
      for (uint64_t lane = 0; lane < 32; ++lane) EXPECT_EQ(fg::hcl_word(64 + lane, 3, i, w), first + lane);
    }
  // Warps and entries do not overlap: every (slot, entry, word) has its own place.
  std::vector<bool> seen(128 * 3 * 4, false);
  for (uint64_t s = 0; s < 128; ++s)
    for (uint32_t i = 0; i < 3; ++i)
      for (uint32_t w = 0; w < 4; ++w) {
        const uint64_t at = fg::hcl_word(s, 3, i, w);
        ASSERT_LT(at, seen.size());
        ASSERT_FALSE(seen[at]);
        seen[at] = true;
      }
}

TEST(GpmLogFormat, PackingRoundTrips) {
  const uint64_t seq = fg::make_seq(fg::kMaxEpoch, fg::kMaxTxPerLaunch - 1);
  const uint64_t tag = fg::make_tag(seq, 254, 4095);
  EXPECT_EQ(fg::tag_seq(tag), seq);
  EXPECT_EQ(fg::tag_index(tag), 254u);
  EXPECT_EQ(fg::tag_owner(tag), 4095u);
  const uint64_t st = fg::make_state(seq, 255, fg::kPhaseCommitted);
  EXPECT_EQ(fg::state_seq(st), seq);
  EXPECT_EQ(fg::state_count(st), 255u);
  EXPECT_EQ(fg::state_phase(st), fg::kPhaseCommitted);
  EXPECT_NE(fg::entry_check(0, 0, 0, 0), 0u);  // a zero entry never passes
}

// Forges the entries of one transaction of slot 0 with the format helpers.
void forge(GpmPool& gp, const gpm::LogInfo& log, uint64_t seq, const std::vector<std::pair<uint64_t, uint64_t>>& writes) {
  uint64_t* e = gp.log_entries(log);
  for (uint32_t i = 0; i < writes.size(); ++i) {
    const uint64_t tag = fg::make_tag(seq, i, 0);
    const uint64_t words[4] = {writes[i].first, writes[i].second, tag, fg::entry_check(writes[i].first, writes[i].second, tag, 0)};
    for (uint32_t w = 0; w < 4; ++w) e[fg::hcl_word(0, log.header.entries_per_slot, i, w)] = words[w];
  }
}

TEST(GpmLogRecovery, TornEntryOfAnUnfinishedUndoTransactionIsSkippedAndCounted) {
  TempPool path("gpmtorn");
  auto gp = GpmPool::create(path.path());
  const gpm::Region r = gp->create_region("data", 4096);
  gpm::LogOptions o;
  o.slots = 32;
  o.entries_per_slot = 4;
  gpm::LogInfo log = gp->create_log("log", o);
  auto* words = reinterpret_cast<uint64_t*>(r.host);
  words[0] = 100;
  words[1] = 200;
  forge(*gp, log, fg::make_seq(1, 0), {{r.offset, 7}, {r.offset + 8, 8}});
  gp->log_entries(log)[fg::hcl_word(0, 4, 1, 1)] ^= 1;  // entry 1's value word torn
  const gpm::RecoveryReport rep = gp->recover(log);
  EXPECT_EQ(rep.rolled_back, 1u);
  EXPECT_EQ(rep.undone_writes, 1u);
  EXPECT_EQ(rep.torn_entries, 1u);
  EXPECT_EQ(words[0], 7u);   // the valid entry's old value is back
  EXPECT_EQ(words[1], 200u);  // untouched: its write cannot have happened (the entry was not durable)
}

TEST(GpmLogRecovery, CommittedRedoTransactionMissingAnEntryIsATypedError) {
  TempPool path("gpmredo");
  auto gp = GpmPool::create(path.path());
  const gpm::Region r = gp->create_region("data", 4096);
  gpm::LogOptions o;
  o.mode = fg::kModeRedo;
  o.slots = 32;
  gpm::LogInfo log = gp->create_log("log", o);
  const uint64_t seq = fg::make_seq(1, 0);
  forge(*gp, log, seq, {{r.offset, 7}});
  gp->log_state(log)[0] = fg::make_state(seq, 2, fg::kPhaseCommitted);  // says two entries
  try {
    gp->recover(log);
    FAIL() << "recovered a committed transaction without its entries";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptTable);
  }
}

TEST(GpmLogRecovery, EntryNamingMemoryOutsideEveryRegionIsATypedError) {
  TempPool path("gpmout");
  auto gp = GpmPool::create(path.path());
  gp->create_region("data", 4096);
  gpm::LogOptions o;
  o.slots = 32;
  gpm::LogInfo log = gp->create_log("log", o);
  forge(*gp, log, fg::make_seq(1, 0), {{log.offset, 7}});  // would overwrite the log header
  try {
    gp->recover(log);
    FAIL() << "recovery wrote outside the regions";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptTable);
  }
}

TEST(GpmPoolDirectory, ObjectsSurviveReopenAndNamesAreChecked) {
  TempPool path("gpmdir");
  {
    auto gp = GpmPool::create(path.path());
    gp->create_region("a", 100);
    gp->create_region("b", 1 << 20);
    gpm::LogOptions o;
    o.layout = fg::kLayoutConventional;
    o.slots = 512;
    o.partition_threads = 256;
    o.partition_entries = 4096;
    gp->create_log("log", o);
    gp->create_group("cp", {10, 300});
    EXPECT_THROW(gp->create_region("a", 8), Error);
    EXPECT_THROW(gp->create_region(std::string(40, 'x'), 8), Error);
    o.slots = 100;  // not whole partitions
    EXPECT_THROW(gp->create_log("log2", o), Error);
  }
  auto gp = GpmPool::open(path.path());
  EXPECT_EQ(gp->region("b").bytes, 1u << 20);
  EXPECT_EQ(gp->log("log").header.partition_entries, 4096u);
  EXPECT_EQ(gp->group("cp").header.element_count, 2u);
  try {
    gp->region("nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
  EXPECT_NE(format::describe(gp->pool().header()).find("log log"), std::string::npos);
}

TEST(GpmPoolDirectory, APoolOfAnotherIndexKindIsRefused) {
  TempPool path("gpmkind");
  { auto t = Table::create(path.path(), TableConfig{}); }
  try {
    GpmPool::open(path.path());
    FAIL() << "opened a GPHash pool as a GPM pool";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(e.field(), "index_kind");
  }
}

TEST(GpmPoolDirectory, DamagedDirectoryOrLogHeaderIsATypedError) {
  const auto make = [](const std::string& path) {
    auto gp = GpmPool::create(path);
    gp->create_region("a", 100);
    gpm::LogOptions o;
    o.slots = 32;
    gp->create_log("log", o);
  };
  TempPool bad_directory("gpmbaddir"), bad_log("gpmbadlog");
  make(bad_directory.path());
  make(bad_log.path());
  {
    // A directory entry past pool_used, in both header copies (with valid checksums: one bad copy
    // alone is a torn header write, and the pool falls back to the other).
    auto p = pool::Pool::open(bad_directory.path(), {});
    format::PoolHeader h = p->header();
    h.gpm.objects[0].bytes = h.pool_size * 2;
    p->write_header(h);
    p->write_header(h);
  }
  try {
    GpmPool::open(bad_directory.path());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptHeader);
    EXPECT_EQ(e.field(), "objects[0].bytes");
  }
  {
    auto p = pool::Pool::open(bad_log.path(), {});
    p->at<fg::LogHeader>(p->header().gpm.objects[1].offset)->slots = 64;  // the log header fails its checksum
  }
  try {
    GpmPool::open(bad_log.path());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptTable);
  }
  try {
    Table::open(bad_log.path(), OpenOptions{});  // the index refuses a GPM pool
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "index_kind");
  }
}

TEST(GpmCheckpoint, RestoreGivesTheLastCompletedCheckpoint) {
  TempPool path("gpmcp");
  std::vector<uint64_t> a(1000), b(37);
  auto gp = GpmPool::create(path.path());
  gpm::GroupInfo g = gp->create_group("state", {a.size() * 8, b.size() * 8});
  std::vector<uint64_t> ra(a.size()), rb(b.size());
  EXPECT_EQ(gp->restore_to_host(g, {ra.data(), rb.data()}).sequence, 0u);  // none yet
  for (uint64_t n = 1; n <= 5; ++n) {
    std::fill(a.begin(), a.end(), n);
    std::fill(b.begin(), b.end(), n * 100);
    const gpm::CheckpointState st = gp->checkpoint_from_host(g, {a.data(), b.data()});
    EXPECT_EQ(st.sequence, n);
    EXPECT_EQ(st.copy, (n - 1) % 2);  // double buffering: the copies alternate
  }
  gp.reset();
  gp = GpmPool::open(path.path());
  g = gp->group("state");
  const gpm::CheckpointState st = gp->restore_to_host(g, {ra.data(), rb.data()});
  EXPECT_EQ(st.sequence, 5u);
  EXPECT_EQ(ra, a);
  EXPECT_EQ(rb, b);
}

TEST(GpmCheckpoint, ACrashInTheMiddleOfACheckpointLeavesThePreviousOne) {
  TempPool path("gpmcpcrash");
  auto gp = GpmPool::create(path.path());
  gpm::GroupInfo g = gp->create_group("state", {4096});
  std::vector<uint64_t> v(512, 1), r(512);
  gp->checkpoint_from_host(g, {v.data()});
  gp->checkpoint_from_host(g, {(std::fill(v.begin(), v.end(), 2), v.data())});
  // Checkpoint 3 dies half way through writing the inactive copy, before its record.
  const gpm::CheckpointState valid = gp->valid_checkpoint(g);
  std::memset(gp->element(g, 1 - valid.copy, 0), 0x33, 2000);
  gp.reset();
  gp = GpmPool::open(path.path());
  g = gp->group("state");
  EXPECT_EQ(gp->restore_to_host(g, {r.data()}).sequence, 2u);
  EXPECT_EQ(r, std::vector<uint64_t>(512, 2));
  // Checkpoint 3's record torn (its copy written): the check fails, checkpoint 2 stays valid.
  std::fill(v.begin(), v.end(), 3);
  std::memcpy(gp->element(g, 1 - valid.copy, 0), v.data(), 4096);
  gp->commit_checkpoint(g, 1 - valid.copy, 3);
  reinterpret_cast<uint64_t*>(gp->pool().base() + g.offset + fg::kRecordOffset[3 % 2])[1] ^= 1ull << 40;
  EXPECT_EQ(gp->restore_to_host(g, {r.data()}).sequence, 2u);
  EXPECT_EQ(r, std::vector<uint64_t>(512, 2));
}

}  // namespace
}  // namespace gphash

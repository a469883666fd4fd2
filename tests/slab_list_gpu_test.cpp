// SlabList (src/gpm/examples/slab_list.h), the SlabHash-GPM stand-in, on the GPU (label gpu;
// skipped without one): random batches with duplicate keys against a std::unordered_map applied
// one operation at a time (through BatchPlan, as the benchmark runs them), on every log layout and
// mode; duplicates inside one call; chains many slabs long; a full slab pool; reopen; and crashes:
// a transaction's log left uncommitted at every store of libGPM's commit protocol, run on the CPU
// over the pool with a memory that stops storing at the crash point (as tests/gpm_test.cpp does),
// then recovery at open.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <random>
#include <set>
#include <unordered_map>
#include <vector>

#include "gpm/examples/slab_list.h"
#include "gpu_test_util.h"
#include "test_util.h"

namespace gphash {
namespace {

namespace wl = gpm::workloads;
namespace fg = format::gpm;
using gpm::GpmPool;
using testing::Device;
using testing::TempPool;
using wl::BatchPlan;
using wl::SlabList;

using Value = std::vector<uint64_t>;

// The legacy default stream: the Device<> arrays are filled by cudaMemcpy from pageable memory,
// which may still be in flight when it returns; work on this stream waits for it.
struct DefaultStream {
  cudaStream_t s = nullptr;
};

// A pool, its device mapping and the list, opened or created; destroyed in reverse order.
struct Opened {
  std::unique_ptr<GpmPool> gp;
  std::unique_ptr<gpm::DeviceGpm> dev;
  std::unique_ptr<SlabList> list;
  Opened(const std::string& path, bool create, const SlabList::Geometry& g = {}, wl::LogChoice log = {},
         uint64_t max_batch = 1 << 16) {
    gp = create ? GpmPool::create(path) : GpmPool::open(path);
    dev = std::make_unique<gpm::DeviceGpm>(*gp);
    list = std::make_unique<SlabList>(*gp, *dev, "sl", create, g, log, max_batch);
  }
  ~Opened() {
    list.reset();
    dev.reset();
    gp.reset();
  }
};

// What one operation of a batch returned.
struct Result {
  bool ok = false;  // get: found; set: succeeded; erase: the key was there
  Value value;      // get, when found
};

// Runs a mixed batch as the benchmark does: combined on the host, then gets, sets, erases.
std::vector<Result> run_batch(SlabList& list, const std::vector<BatchPlan::Kind>& kinds, const std::vector<uint64_t>& keys,
                              const std::vector<Value>& values, cudaStream_t s) {
  const uint32_t vw = list.geometry().value_width / 8;
  const size_t n = kinds.size();
  BatchPlan plan;
  plan.build(kinds.data(), keys.data(), n);
  std::vector<uint64_t> gk, sk, sv, ek;
  for (uint64_t i : plan.gets) gk.push_back(keys[i]);
  for (uint64_t i : plan.sets) {
    sk.push_back(keys[i]);
    sv.insert(sv.end(), values[i].begin(), values[i].end());
  }
  for (uint64_t i : plan.erases) ek.push_back(keys[i]);
  Device<uint64_t> dgk(gk), dgv(gk.size() * vw), dsk(sk), dsv(sv), dek(ek);
  Device<uint8_t> dfound(gk.size()), dss(sk.size()), des(ek.size());
  list.get(dgk.p, dgv.p, dfound.p, gk.size(), s);
  const uint64_t failed = list.set(dsk.p, dsv.p, sk.size(), dss.p, s);
  const uint64_t erased = list.erase(dek.p, ek.size(), des.p, s);
  const std::vector<uint8_t> found = dfound.get(), ss = dss.get(), es = des.get();
  const std::vector<uint64_t> got = dgv.get();
  std::vector<uint8_t> set_ok(ss.size()), erase_ok(es.size());
  uint64_t not_ok = 0, ok_erases = 0;
  for (size_t i = 0; i < ss.size(); ++i) {
    set_ok[i] = ss[i] == SlabList::kOk;
    not_ok += !set_ok[i];
  }
  for (size_t i = 0; i < es.size(); ++i) {
    erase_ok[i] = es[i] == SlabList::kOk;
    ok_erases += erase_ok[i];
  }
  EXPECT_EQ(failed, not_ok);
  EXPECT_EQ(erased, ok_erases);
  std::vector<Result> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (kinds[i] != BatchPlan::kGet) {
      out[i].ok = plan.write_ok(i, found.data(), set_ok.data(), erase_ok.data());
      continue;
    }
    out[i].ok = plan.get_found(i, found.data());
    if (!out[i].ok) continue;
    if (plan.value_source(i) >= 0) {
      out[i].value = values[plan.value_source(i)];
    } else {
      const uint64_t at = plan.table_position(i) * vw;
      out[i].value.assign(got.begin() + at, got.begin() + at + vw);
    }
  }
  return out;
}

// Every key of the model through the GPU, and some absent ones.
void expect_matches(SlabList& list, const std::unordered_map<uint64_t, Value>& model, uint64_t absent_from, cudaStream_t s) {
  const uint32_t vw = list.geometry().value_width / 8;
  std::vector<uint64_t> keys;
  for (const auto& [k, v] : model) keys.push_back(k);
  for (uint64_t a = 0; a < 100; ++a) keys.push_back(absent_from + a);
  Device<uint64_t> dk(keys), dv(keys.size() * vw);
  Device<uint8_t> df(keys.size());
  list.get(dk.p, dv.p, df.p, keys.size(), s);
  const std::vector<uint64_t> got = dv.get();
  const std::vector<uint8_t> found = df.get();
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = model.find(keys[i]);
    ASSERT_EQ(found[i] != 0, it != model.end()) << "key " << keys[i];
    if (it != model.end()) {
      ASSERT_EQ(Value(got.begin() + i * vw, got.begin() + (i + 1) * vw), it->second) << "key " << keys[i];
    }
  }
  EXPECT_EQ(list.size(), model.size());
  EXPECT_EQ(list.host_count(), model.size());
}

// The key words of every slab in use: no key twice.
void expect_no_duplicates(const SlabList& list) {
  std::set<uint64_t> seen;
  for (uint64_t s = 0; s < list.slabs_in_use(); ++s)
    for (uint32_t j = 0; j < SlabList::kKeysPerSlab; ++j) {
      const uint64_t k = list.slab_words()[s * SlabList::kSlabWords + j];
      if (k) {
        ASSERT_TRUE(seen.insert(k).second) << "key " << k << " twice";
      }
    }
}

struct Case {
  const char* name;
  uint64_t buckets, slabs;
  uint32_t value_width;
  uint64_t keyspace;  // keys 1..keyspace
  size_t batch;
  int batches;
};

class SlabListRandom : public ::testing::TestWithParam<std::tuple<Case, wl::LogChoice>> {};

TEST_P(SlabListRandom, BatchesWithDuplicatesMatchAModelAndSurviveReopen) {
  REQUIRE_GPU();
  const auto& [c, log] = GetParam();
  TempPool path("slablist");
  DefaultStream s;
  const uint32_t vw = c.value_width / 8;
  std::unordered_map<uint64_t, Value> model;
  std::mt19937_64 rng(11);
  {
    Opened o(path.path(), true, {c.buckets, c.slabs, c.value_width}, log);
    SlabList& list = *o.list;
    for (int b = 0; b < c.batches; ++b) {
      // Early batches mostly insert; later ones mix gets, sets and erases, keys drawn with
      // replacement from a key space a few times the batch (so duplicates are common).
      const int set_pct = b < c.batches / 3 ? 80 : 40, erase_pct = b < c.batches / 3 ? 5 : 25;
      std::vector<BatchPlan::Kind> kinds(c.batch);
      std::vector<uint64_t> keys(c.batch);
      std::vector<Value> values(c.batch);
      for (size_t i = 0; i < c.batch; ++i) {
        const int r = static_cast<int>(rng() % 100);
        kinds[i] = r < set_pct ? BatchPlan::kSet : r < set_pct + erase_pct ? BatchPlan::kErase : BatchPlan::kGet;
        keys[i] = 1 + rng() % c.keyspace;
        if (kinds[i] == BatchPlan::kSet)
          for (uint32_t x = 0; x < vw; ++x) values[i].push_back(rng());
      }
      const std::vector<Result> got = run_batch(list, kinds, keys, values, s.s);
      for (size_t i = 0; i < c.batch; ++i) {
        auto it = model.find(keys[i]);
        if (kinds[i] == BatchPlan::kGet) {
          ASSERT_EQ(got[i].ok, it != model.end()) << "batch " << b << " op " << i << " key " << keys[i];
          if (got[i].ok) {
            ASSERT_EQ(got[i].value, it->second) << "batch " << b << " op " << i;
          }
        } else if (kinds[i] == BatchPlan::kSet) {
          ASSERT_TRUE(got[i].ok) << "batch " << b << " op " << i;
          model[keys[i]] = values[i];
        } else {
          ASSERT_EQ(got[i].ok, it != model.end()) << "batch " << b << " op " << i << " erase " << keys[i];
          if (it != model.end()) model.erase(it);
        }
      }
      ASSERT_EQ(list.size(), model.size()) << "batch " << b;
    }
    expect_matches(list, model, c.keyspace + 1, s.s);
    expect_no_duplicates(list);
  }
  Opened o(path.path(), false);
  EXPECT_EQ(o.list->geometry().buckets, c.buckets);
  EXPECT_EQ(o.list->geometry().value_width, c.value_width);
  expect_matches(*o.list, model, c.keyspace + 1, s.s);
}

const Case kCases[] = {
    // Many buckets, 128-byte values (the benchmark's): chains of one or two slabs.
    {"wide128", 1024, 4096, 128, 12000, 5000, 9},
    // Four buckets, 8-byte values: chains of ~20 slabs, erased slots reused.
    {"chains8", 4, 1024, 8, 1500, 800, 9},
    // A middle width and a few dozen buckets.
    {"mid24", 48, 1024, 24, 4000, 2000, 9},
};
const wl::LogChoice kLogs[] = {{gpm::kLayoutHcl, gpm::kModeUndo},
                               {gpm::kLayoutHcl, gpm::kModeRedo},
                               {gpm::kLayoutConventional, gpm::kModeUndo},
                               {gpm::kLayoutConventional, gpm::kModeRedo}};

INSTANTIATE_TEST_SUITE_P(All, SlabListRandom, ::testing::Combine(::testing::ValuesIn(kCases), ::testing::ValuesIn(kLogs)),
                         [](const auto& info) {
                           std::string n = std::string(std::get<0>(info.param).name) + "_" + wl::to_string(std::get<1>(info.param));
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(SlabList, DuplicateKeysInOneCallLeaveOneEntryHoldingOneOfTheirValues) {
  REQUIRE_GPU();
  TempPool path("slabdup");
  DefaultStream s;
  Opened o(path.path(), true, {2, 64, 16});
  SlabList& list = *o.list;
  constexpr uint64_t kKeys = 40, kCopies = 150;  // 40 keys in 2 buckets: chains of 2 slabs
  std::vector<uint64_t> keys, values;
  std::mt19937_64 rng(3);
  for (uint64_t c = 0; c < kCopies; ++c)
    for (uint64_t k = 1; k <= kKeys; ++k) {
      keys.push_back(k * 1000003);
      values.push_back(k);  // word 0 names the key, word 1 the copy
      values.push_back(c);
    }
  std::shuffle(keys.begin(), keys.end(), rng);  // values no longer line up: find them by key below
  for (size_t i = 0; i < keys.size(); ++i) values[2 * i] = keys[i] / 1000003;
  Device<uint64_t> dk(keys), dv(values);
  Device<uint8_t> ds(keys.size());
  EXPECT_EQ(list.set(dk.p, dv.p, keys.size(), ds.p, s.s), 0u);
  for (uint8_t st : ds.get()) ASSERT_EQ(st, SlabList::kOk);
  EXPECT_EQ(list.size(), kKeys);
  EXPECT_EQ(list.host_count(), kKeys);
  expect_no_duplicates(list);
  for (uint64_t k = 1; k <= kKeys; ++k) {
    uint64_t slab = 0;
    uint32_t slot = 0;
    ASSERT_TRUE(list.host_find(k * 1000003, &slab, &slot));
    const uint64_t* v = list.value_words() + (slab * SlabList::kKeysPerSlab + slot) * 2;
    EXPECT_EQ(v[0], k);      // a whole value of this key
    EXPECT_LT(v[1], kCopies);
  }
  // Erasing one key 30 times in one call: one finds it.
  std::vector<uint64_t> twice(30, 7 * 1000003);
  Device<uint64_t> de(twice);
  Device<uint8_t> des(twice.size());
  EXPECT_EQ(list.erase(de.p, twice.size(), des.p, s.s), 1u);
  uint64_t ok = 0;
  for (uint8_t st : des.get()) ok += st == SlabList::kOk;
  EXPECT_EQ(ok, 1u);
  EXPECT_EQ(list.size(), kKeys - 1);
}

TEST(SlabList, LongChainsReuseErasedSlotsAndAFullPoolSaysNoRoom) {
  REQUIRE_GPU();
  TempPool path("slabfull");
  DefaultStream s;
  Opened o(path.path(), true, {1, 4, 8});  // one bucket, 4 slabs: 60 keys at most
  SlabList& list = *o.list;
  auto set = [&](uint64_t first, uint64_t n, std::vector<uint8_t>* status) {
    std::vector<uint64_t> keys(n), values(n);
    for (uint64_t i = 0; i < n; ++i) keys[i] = first + i, values[i] = (first + i) * 3;
    Device<uint64_t> dk(keys), dv(values);
    Device<uint8_t> ds(n);
    const uint64_t failed = list.set(dk.p, dv.p, n, ds.p, s.s);
    *status = ds.get();
    return failed;
  };
  std::vector<uint8_t> st;
  EXPECT_EQ(set(1, 50, &st), 0u);
  EXPECT_EQ(list.slabs_in_use(), 4u);  // the head and 3 appended: 4 slabs for 50 keys
  // Erase 20, insert 20 new: the holes take them, no slab is appended.
  std::vector<uint64_t> gone(20);
  for (uint64_t i = 0; i < 20; ++i) gone[i] = 1 + 2 * i;
  Device<uint64_t> dg(gone);
  EXPECT_EQ(list.erase(dg.p, gone.size(), nullptr, s.s), 20u);
  EXPECT_EQ(set(1001, 20, &st), 0u);
  EXPECT_EQ(list.slabs_in_use(), 4u);
  EXPECT_EQ(list.size(), 50u);
  // 10 more fit, then the pool is used up.
  EXPECT_EQ(set(2001, 15, &st), 5u);
  uint64_t no_room = 0;
  for (uint8_t x : st) no_room += x == SlabList::kNoRoom;
  EXPECT_EQ(no_room, 5u);
  EXPECT_EQ(list.size(), 60u);
  // Every key that went in reads back.
  std::unordered_map<uint64_t, Value> model;
  for (uint64_t k = 1; k <= 50; ++k)
    if (k % 2 == 0 || k > 39) model[k] = {k * 3};
  for (uint64_t k = 1001; k <= 1020; ++k) model[k] = {k * 3};
  std::vector<uint64_t> probe(15);
  for (uint64_t i = 0; i < 15; ++i) probe[i] = 2001 + i;
  Device<uint64_t> dp(probe), dpv(15);
  Device<uint8_t> dpf(15);
  list.get(dp.p, dpv.p, dpf.p, 15, s.s);
  const std::vector<uint8_t> f = dpf.get();
  const std::vector<uint64_t> v = dpv.get();
  for (size_t i = 0; i < 15; ++i) {
    ASSERT_EQ(f[i] != 0, st[i] == SlabList::kOk) << probe[i];
    if (f[i]) model[probe[i]] = {v[i]};
  }
  expect_matches(list, model, 100000, s.s);
  // Key 0 is refused.
  uint64_t zero = 0, val = 1;
  Device<uint64_t> dz(&zero, 1), dzv(&val, 1);
  Device<uint8_t> dzs(1);
  EXPECT_EQ(list.set(dz.p, dzv.p, 1, dzs.p, s.s), 1u);
  EXPECT_EQ(dzs.get()[0], SlabList::kBadKey);
}

// ---- crashes: a transaction left uncommitted ---------------------------------------------

// libGPM's memory policy on the CPU that loses every store from the crash_at-th on (the process
// died there): the pool keeps exactly the stores made before.
struct CrashMemory {
  uint64_t* stores;
  uint64_t crash_at;
  void store(uint64_t* p, uint64_t v) const {
    if ((*stores)++ < crash_at) *reinterpret_cast<volatile uint64_t*>(p) = v;
  }
  uint64_t load(const uint64_t* p) const { return *reinterpret_cast<const volatile uint64_t*>(p); }
  void barrier() const { std::atomic_thread_fence(std::memory_order_seq_cst); }
  unsigned long long reserve(unsigned long long* counter, uint32_t n) const {
    const unsigned long long old = *counter;
    *counter += n;
    return old;
  }
};

// The log as a launch sees it, for slot 0 (warp 0) of a new launch epoch.
struct HostLog {
  std::vector<unsigned long long> tails;
  unsigned full = 0;
  gpm::LogView view;
  HostLog(GpmPool& gp, const gpm::LogInfo& log) {
    const fg::LogHeader& h = log.header;
    tails.assign(h.slots / h.partition_threads, 0);
    view = {gp.log_state(log), gp.log_entries(log), reinterpret_cast<uintptr_t>(gp.pool().base()), h.layout, h.mode,
            h.slots, h.entries_per_slot, h.partition_threads, h.partition_entries, gp.begin_launch(log), tails.data(), &full};
  }
};

std::unordered_map<uint64_t, Value> load_keys(const std::string& path, const SlabList::Geometry& g, uint64_t n) {
  Opened o(path, true, g);
  DefaultStream s;
  const uint32_t vw = g.value_width / 8;
  std::unordered_map<uint64_t, Value> model;
  std::vector<uint64_t> keys, values;
  for (uint64_t k = 1; k <= n; ++k) {
    keys.push_back(k * 7919);
    for (uint32_t x = 0; x < vw; ++x) values.push_back(k * 100 + x);
    model[k * 7919] = Value(values.end() - vw, values.end());
  }
  Device<uint64_t> dk(keys), dv(values);
  EXPECT_EQ(o.list->set(dk.p, dv.p, keys.size(), nullptr, s.s), 0u);
  return model;
}

TEST(SlabListCrash, UpdateLeftUncommittedAtEveryStoreRecoversTheOldValueWhole) {
  REQUIRE_GPU();
  TempPool path("slabcrashupd");
  DefaultStream s;
  const SlabList::Geometry g{16, 128, 32};  // 4-word values
  std::unordered_map<uint64_t, Value> model = load_keys(path.path(), g, 200);
  const uint64_t key = 77 * 7919;
  const Value fresh = {1, 2, 3, 4};
  const uint32_t entries = 4, total = entries * 4 + entries + 1;  // log entries, in place, DONE
  for (uint32_t crash = 0; crash <= total; ++crash) {
    {
      Opened o(path.path(), false);
      uint64_t slab = 0;
      uint32_t slot = 0;
      ASSERT_TRUE(o.list->host_find(key, &slab, &slot));
      uint64_t* at = o.list->value_words() + (slab * SlabList::kKeysPerSlab + slot) * 4;
      HostLog log(*o.gp, o.list->log_info());
      auto tx = gpm::begin<SlabList::kMaxTxWrites>(log.view, 0, 0);
      for (uint32_t x = 0; x < 4; ++x) tx.write(at + x, fresh[x]);
      uint64_t stores = 0;
      gpm::commit(log.view, CrashMemory{&stores, crash}, tx);
      ASSERT_EQ(stores, total);
    }  // the process "dies": nothing else reaches the pool
    Opened o(path.path(), false);  // recovery
    const auto& reports = o.gp->recovery_reports();
    ASSERT_EQ(reports.size(), 1u);
    // Recovery rolls back once any entry is whole (its 4 words stored) and DONE is not.
    const bool logged = crash >= 4, done = crash == total;
    EXPECT_EQ(reports[0].second.rolled_back, logged && !done ? 1u : 0u) << "crash at store " << crash;
    if (done) model[key] = fresh;
    expect_matches(*o.list, model, 1, s.s);
  }
}

TEST(SlabListCrash, SlabAppendLeftUncommittedLeavesTheSlabPoolAsItWas) {
  REQUIRE_GPU();
  const SlabList::Geometry g{1, 8, 16};  // one bucket: the 16th key appends slab 1
  const uint32_t total = 3 * 4 + 3 + 1;
  for (uint32_t crash : {0u, 5u, 12u, 13u, 14u, 15u, 16u}) {
    SCOPED_TRACE(crash);
    TempPool path("slabcrashapp");
    DefaultStream s;
    std::unordered_map<uint64_t, Value> model = load_keys(path.path(), g, 15);
    const uint64_t key = 424242;
    {
      Opened o(path.path(), false);
      SlabList& list = *o.list;
      ASSERT_EQ(list.slabs_in_use(), 1u);
      const uint64_t c = 1;
      uint64_t* value = list.value_words() + c * SlabList::kKeysPerSlab * 2;
      value[0] = 5, value[1] = 6;  // unlogged: slab 1 is unreachable
      HostLog log(*o.gp, list.log_info());
      auto tx = gpm::begin<SlabList::kMaxTxWrites>(log.view, 0, 0);
      tx.write(list.counter_word(), c + 1);
      tx.write(list.slab_words() + SlabList::kNextWord, c);
      tx.write(list.slab_words() + c * SlabList::kSlabWords, key);
      uint64_t stores = 0;
      gpm::commit(log.view, CrashMemory{&stores, crash}, tx);
      ASSERT_EQ(stores, total);
    }
    Opened o(path.path(), false);
    SlabList& list = *o.list;
    if (crash == total) {
      EXPECT_EQ(list.slabs_in_use(), 2u);
      model[key] = {5, 6};
    } else {
      EXPECT_EQ(list.slabs_in_use(), 1u);
      EXPECT_EQ(list.slab_words()[SlabList::kNextWord], 0u);
      for (uint32_t w = 0; w < SlabList::kSlabWords; ++w) EXPECT_EQ(list.slab_words()[SlabList::kSlabWords + w], 0u) << w;
    }
    expect_matches(list, model, 1, s.s);
    // The table goes on: a new key appends (slab 1 again after an undone append).
    const uint64_t more[2] = {31337, 31338};
    const uint64_t vals[4] = {7, 8, 9, 10};
    Device<uint64_t> dk(more, 2), dv(vals, 4);
    EXPECT_EQ(list.set(dk.p, dv.p, 2, nullptr, s.s), 0u);
    model[31337] = {7, 8};
    model[31338] = {9, 10};
    expect_matches(list, model, 1, s.s);
    expect_no_duplicates(list);
  }
}

TEST(SlabListCrash, EraseLeftUncommittedBringsTheKeyBack) {
  REQUIRE_GPU();
  TempPool path("slabcrasherase");
  DefaultStream s;
  const SlabList::Geometry g{4, 64, 8};
  std::unordered_map<uint64_t, Value> model = load_keys(path.path(), g, 100);
  const uint64_t key = 50 * 7919;
  {
    Opened o(path.path(), false);
    uint64_t slab = 0;
    uint32_t slot = 0;
    ASSERT_TRUE(o.list->host_find(key, &slab, &slot));
    HostLog log(*o.gp, o.list->log_info());
    auto tx = gpm::begin<SlabList::kMaxTxWrites>(log.view, 0, 0);
    tx.write(o.list->slab_words() + slab * SlabList::kSlabWords + slot, 0);
    uint64_t stores = 0;
    gpm::commit(log.view, CrashMemory{&stores, 5}, tx);  // entry and in-place write done, DONE lost
    ASSERT_EQ(o.list->slab_words()[slab * SlabList::kSlabWords + slot], 0u);
  }
  Opened o(path.path(), false);
  EXPECT_EQ(o.gp->recovery_reports()[0].second.rolled_back, 1u);
  expect_matches(*o.list, model, 1, s.s);
}

}  // namespace
}  // namespace gphash

// The key-value layer against a model: memcached's semantics in rounds, signature collisions
// forced through a weak signature function, cache-mode eviction, store-mode exhaustion and
// recovery after a crash (a child process that dies without closing the pool).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gphash/table.h"
#include "kv/kv_store.h"
#include "kv/tick_clock.h"
#include "pool/pool.h"

using namespace gphash::kv;

namespace {

// Two signatures for every key: chains of many items with one signature, always.
Signature weak_signature(std::string_view key) {
  uint64_t h = 0;
  for (char c : key) h += static_cast<unsigned char>(c);
  return {h & 1, 0};
}

struct ModelItem {
  std::string value;
  uint32_t flags = 0;
  uint64_t cas = 0;
};

// Built with += (GCC 12 warns falsely about "literal" + std::string here).
std::string numbered(const char* prefix, uint64_t i) {
  std::string s(prefix);
  s += std::to_string(i);
  return s;
}

std::string pool_name(const char* what) { return "gphash-server-kvtest-" + std::string(what) + "-" + std::to_string(getpid()); }

void remove_pool(const std::string& pool) {
  std::remove(("/dev/shm/" + pool + ".index").c_str());
  std::remove(("/dev/shm/" + pool + ".items").c_str());
}

// One random round: its commands and the strings they view (kept in place while the round lives).
struct RandomRound {
  std::vector<KvCommand> cmds;
  std::vector<std::string> keys, values;
  std::vector<KvCommand*> ptrs;
};

// Runs random rounds against the store and a model and compares every result. `pipelined`: as the
// server runs them (KvStore::run), each round's index changes written with the next round's
// searches; with a pipelined store (KvConfig::pipeline) a round is resolved by the next run, so it
// is checked then. A round's commands stay alive until they settle, as the server's requests do.
void run_model(KvStore& store, uint64_t seed, int rounds, int keys, bool pipelined = false) {
  std::mt19937_64 rng(seed);
  std::map<std::string, ModelItem> model;
  uint64_t next_cas = store.config().cas_first;
  const uint64_t cas_stride = store.config().cas_stride;
  auto check = [&](RandomRound& round, int r) {
    for (size_t i = 0; i < round.cmds.size(); ++i) {
      KvCommand& c = round.cmds[i];
      const std::string key(c.key);
      auto it = model.find(key);
      SCOPED_TRACE("round " + std::to_string(r) + " command " + std::to_string(i) + " key " + key);
      switch (c.op) {
        case KvOp::kGet:
          if (it == model.end()) {
            EXPECT_EQ(c.status, KvStatus::kNotFound);
          } else {
            ASSERT_EQ(c.status, KvStatus::kOk);
            ASSERT_NE(c.item, 0u);
            EXPECT_EQ(store.value(c.item), it->second.value);
            EXPECT_EQ(store.key(c.item), key);
            EXPECT_EQ(c.flags, it->second.flags);
            EXPECT_EQ(c.cas, it->second.cas);
            store.release(c.item);
          }
          break;
        case KvOp::kStore: {
          KvStatus want = KvStatus::kOk;
          std::string value(c.value);
          uint32_t flags = c.client_flags;
          if (c.has_compare_cas) {
            want = it == model.end() ? KvStatus::kNotFound : it->second.cas != c.compare_cas ? KvStatus::kExists : KvStatus::kOk;
          } else if (c.mode == StoreMode::kAdd) {
            want = it == model.end() ? KvStatus::kOk : KvStatus::kNotStored;
          } else if (c.mode != StoreMode::kSet && it == model.end()) {
            want = KvStatus::kNotStored;
          } else if (c.mode == StoreMode::kAppend) {
            value = it->second.value + value;
            flags = it->second.flags;
          } else if (c.mode == StoreMode::kPrepend) {
            value = value + it->second.value;
            flags = it->second.flags;
          }
          ASSERT_EQ(c.status, want);
          if (want == KvStatus::kOk) {
            model[key] = {value, flags, std::exchange(next_cas, next_cas + cas_stride)};
            EXPECT_EQ(c.cas, model[key].cas);
          }
          break;
        }
        case KvOp::kDelete:
          ASSERT_EQ(c.status, it == model.end() ? KvStatus::kNotFound : KvStatus::kOk);
          if (it != model.end()) model.erase(it);
          break;
        case KvOp::kArith: {
          if (it == model.end()) {
            ASSERT_EQ(c.status, KvStatus::kNotFound);
            break;
          }
          const std::string& old = it->second.value;
          const bool numeric = !old.empty() && old.size() <= 20 && old.find_first_not_of("0123456789 ") == std::string::npos &&
                               old[0] != ' ' && std::stoull(old) <= UINT64_MAX;
          if (!numeric) {
            ASSERT_EQ(c.status, KvStatus::kNonNumeric);
            break;
          }
          ASSERT_EQ(c.status, KvStatus::kOk);
          uint64_t v = std::stoull(old);
          v = c.decrement ? (c.delta > v ? 0 : v - c.delta) : v + c.delta;
          std::string text = std::to_string(v);
          if (text.size() < old.size()) text.append(old.size() - text.size(), ' ');
          EXPECT_EQ(c.number, v);
          it->second.value = text;
          it->second.cas = std::exchange(next_cas, next_cas + cas_stride);
          break;
        }
        default: break;
      }
    }
  };
  std::vector<std::unique_ptr<RandomRound>> alive;  // rounds whose commands may not have settled
  std::unique_ptr<RandomRound> unchecked;           // a pipelined store's launched round
  for (int r = 0; r < rounds; ++r) {
    const int n = 1 + static_cast<int>(rng() % 24);
    auto round = std::make_unique<RandomRound>();
    round->cmds.resize(n);
    round->keys.resize(n);
    round->values.resize(n);
    for (int i = 0; i < n; ++i) {
      round->keys[i] = numbered("key", rng() % keys);
      const int kind = static_cast<int>(rng() % 10);
      round->values[i] = (kind == 8 || rng() % 4 == 0) ? std::to_string(rng() % 1000) : std::string(rng() % 300, static_cast<char>('a' + rng() % 26));
      KvCommand& c = round->cmds[i];
      c.key = round->keys[i];
      switch (kind) {
        case 0: case 1: case 2: c.op = KvOp::kGet; break;
        case 3: c.op = KvOp::kStore; c.mode = StoreMode::kSet; break;
        case 4: c.op = KvOp::kStore; c.mode = static_cast<StoreMode>(1 + rng() % 4); break;
        case 5: c.op = KvOp::kDelete; break;
        case 6: c.op = KvOp::kArith; c.delta = rng() % 50; c.decrement = rng() % 2; break;
        case 7: c.op = KvOp::kStore; c.has_compare_cas = true; c.compare_cas = rng() % 2 && model.count(round->keys[i]) ? model[round->keys[i]].cas : rng() % 100; break;
        default: c.op = KvOp::kStore; c.mode = StoreMode::kSet; break;
      }
      if (c.op == KvOp::kStore) {
        c.value = round->values[i];
        c.client_flags = static_cast<uint32_t>(rng() % 5);
      }
    }
    for (auto& c : round->cmds) round->ptrs.push_back(&c);
    if (!pipelined) {
      store.execute(round->ptrs);
      check(*round, r);
      continue;
    }
    store.run(round->ptrs);
    if (store.pipelined()) {
      if (unchecked) check(*unchecked, r - 1);
      if (unchecked) alive.push_back(std::move(unchecked));
      unchecked = std::move(round);
    } else {
      check(*round, r);
      alive.push_back(std::move(round));
    }
    // Rounds whose every command settled may go; a command never settles before its round is
    // resolved, and always within three runs.
    std::erase_if(alive, [](const std::unique_ptr<RandomRound>& a) {
      return std::all_of(a->cmds.begin(), a->cmds.end(), [](const KvCommand& c) { return c.settled; });
    });
    EXPECT_LE(alive.size(), 3u);
  }
  store.commit();
  if (unchecked) {
    check(*unchecked, rounds - 1);
    alive.push_back(std::move(unchecked));
  }
  for (const auto& a : alive)
    for (const KvCommand& c : a->cmds) EXPECT_TRUE(c.settled);
  EXPECT_FALSE(store.has_pending());
  EXPECT_EQ(store.items(), model.size());
}

KvCommand command(KvOp op, const char* key, const char* value = "") {
  KvCommand c;
  c.op = op;
  c.key = key;
  c.value = value;
  return c;
}

// GPHASH_KV_TEST_ENGINE=gpu runs the index on the GPU (on the GPU machine; without the crash
// test, whose child would inherit the parent's CUDA context).
KvConfig cache_config(SignatureFn sig, uint64_t memory = 64 << 20) {
  KvConfig c;
  c.mode = Mode::kCache;
  c.memory_bytes = memory;
  c.signature = sig;
  if (const char* engine = std::getenv("GPHASH_KV_TEST_ENGINE"); engine && std::string_view(engine) == "gpu")
    c.engine = gphash::EngineKind::kGpu;
  return c;
}

}  // namespace

TEST(KvStore, MatchesModel) {
  KvStore store(cache_config(xxh3_signature));
  run_model(store, 1, 3000, 200);
}

// The server's partition 2 of 3 (--partitions 3): CAS values 3, 6, 9, ..., unique across the
// partitions, through every operation and across a reopen of the pool.
TEST(KvStore, CasValuesOfAPartitionStayInItsSequence) {
  KvConfig config = cache_config(xxh3_signature);
  config.cas_first = 3;
  config.cas_stride = 3;
  {
    KvStore store(config);
    run_model(store, 11, 500, 100);
  }
  const std::string pool = pool_name("cas-stride");
  remove_pool(pool);
  config.mode = Mode::kStore;
  config.pool = pool;
  auto set = [](KvStore& store, const char* key, uint64_t explicit_cas = 0) {
    KvCommand c = command(KvOp::kStore, key, "v");
    c.explicit_cas = explicit_cas;
    KvCommand* round[] = {&c};
    store.execute(round);
    EXPECT_EQ(c.status, KvStatus::kOk);
    return c.cas;
  };
  {
    KvStore store(config);
    EXPECT_EQ(set(store, "a"), 3u);
    EXPECT_EQ(set(store, "b"), 6u);
    EXPECT_EQ(set(store, "c", 100), 100u);  // meta E: the client's value; the sequence goes on above it
    EXPECT_EQ(set(store, "d"), 102u);
  }
  {
    KvStore store(config);  // reopened: the sequence resumes above the largest value it holds
    EXPECT_EQ(set(store, "e"), 105u);
  }
  remove_pool(pool);
}

TEST(KvStore, SignatureCollisionsLoseNothing) {
  // Every key shares one of two signatures: each lookup walks a chain and compares full keys.
  KvStore store(cache_config(weak_signature));
  run_model(store, 2, 2000, 60);
  EXPECT_GT(store.counters().signature_collisions.load(), 1000u);
}

namespace {
void run_model_in_store_mode(const char* name, SignatureFn sig, uint64_t seed, int rounds, int keys, bool pipelined,
                             bool pipelined_store = false, std::optional<bool> answer_repeated_searches = {}) {
  const std::string pool = pool_name(name);
  remove_pool(pool);
  {
    KvConfig c = cache_config(sig);
    c.mode = Mode::kStore;
    c.pool = pool;
    c.pipeline = pipelined_store;
    c.answer_repeated_searches = answer_repeated_searches;
    KvStore store(c);
    run_model(store, seed, rounds, keys, pipelined);
  }
  remove_pool(pool);
}
}  // namespace

TEST(KvStore, StoreModeMatchesModelWithCollisions) { run_model_in_store_mode("model", weak_signature, 3, 1500, 60, false); }

TEST(KvStore, PipelinedRoundsMatchModel) {
  KvStore cache(cache_config(weak_signature));
  run_model(cache, 4, 2000, 60, /*pipelined=*/true);
  run_model_in_store_mode("pipelined", xxh3_signature, 5, 1500, 200, /*pipelined=*/true);
}

// A pipelined store resolves each round while the next one's searches run, on top of the changes
// those searches did not see: the same results as one round at a time, collisions and eviction
// included.
TEST(KvStore, OverlappedRoundsMatchModel) {
  KvConfig c = cache_config(weak_signature);
  c.pipeline = true;
  KvStore cache(c);
  ASSERT_TRUE(cache.pipelined());
  run_model(cache, 6, 2000, 60, /*pipelined=*/true);
  run_model_in_store_mode("overlapped", weak_signature, 8, 1500, 60, /*pipelined=*/true, /*pipelined_store=*/true);
  run_model_in_store_mode("overlapped2", xxh3_signature, 9, 1500, 200, /*pipelined=*/true, /*pipelined_store=*/true);
}

// KvConfig::answer_repeated_searches (by default only with the GPU engine): a round's searches of
// signatures that the same index batch changes, answered by those changes, give the same results.
TEST(KvStore, SearchesAnsweredByTheBatchsChangesMatchModel) {
  for (const bool pipeline : {false, true}) {
    KvConfig c = cache_config(weak_signature);
    c.pipeline = pipeline;
    c.answer_repeated_searches = true;
    KvStore cache(c);
    run_model(cache, 12, 2000, 60, /*pipelined=*/true);
  }
  run_model_in_store_mode("answered", weak_signature, 13, 1500, 60, /*pipelined=*/true, /*pipelined_store=*/false, true);
  run_model_in_store_mode("answered2", xxh3_signature, 14, 1500, 200, /*pipelined=*/true, /*pipelined_store=*/true, true);
}

// Pipelined, a round is resolved while the next one's searches run, and a read of a signature
// that the round before changed takes its head from the changes on their way: it is final with
// their batch, one run before the commands that changed something themselves.
TEST(KvStore, OverlappedReadsSettleWithTheBatchCarryingWhatTheyRead) {
  KvConfig config = cache_config(xxh3_signature);
  config.pipeline = true;
  KvStore store(config);
  std::vector<KvCommand> r1{command(KvOp::kStore, "a", "1")};
  std::vector<KvCommand> r2{command(KvOp::kGet, "a"), command(KvOp::kStore, "b", "2")};
  std::vector<KvCommand> r3{command(KvOp::kGet, "x")}, r4{command(KvOp::kGet, "y")};
  auto run = [&](std::vector<KvCommand>& cmds) {
    std::vector<KvCommand*> ptrs;
    for (auto& c : cmds) ptrs.push_back(&c);
    store.run(ptrs);
  };
  run(r1);
  EXPECT_EQ(store.rounds_resolved(), 0u);  // its searches are on their way
  run(r2);                                  // resolves r1: its set waits for its change
  EXPECT_EQ(store.rounds_resolved(), 1u);
  EXPECT_FALSE(r1[0].settled);
  run(r3);  // sends r1's change, resolves r2 on top of it
  EXPECT_EQ(r2[0].status, KvStatus::kOk);
  ASSERT_NE(r2[0].item, 0u);
  EXPECT_EQ(store.value(r2[0].item), "1");
  store.release(r2[0].item);
  EXPECT_FALSE(r1[0].settled);
  EXPECT_FALSE(r2[0].settled);  // read r1's change, which is on its way
  EXPECT_FALSE(r2[1].settled);  // its own change is not sent yet
  run(r4);  // r1's change is in the index
  EXPECT_TRUE(r1[0].settled);
  EXPECT_TRUE(r2[0].settled);
  EXPECT_FALSE(r2[1].settled);
  EXPECT_TRUE(r3[0].settled);  // a miss nothing changed
  EXPECT_EQ(r3[0].status, KvStatus::kNotFound);
  store.commit();
  EXPECT_TRUE(r2[1].settled);
  EXPECT_TRUE(r4[0].settled);
  EXPECT_FALSE(store.has_pending());
}

// Eviction a round ahead: victims are planned when a round's searches are sent and the round
// before may reuse their chunks meanwhile. Every value names its key, so a hit that reached a
// reused chunk would show.
TEST(KvStore, OverlappedRoundsEvictCorrectly) {
  KvConfig c = cache_config(weak_signature, 4 << 20);
  c.pipeline = true;
  KvStore store(c);
  std::mt19937_64 rng(10);
  const std::string padding(1000, 'x');
  std::vector<std::unique_ptr<RandomRound>> rounds;
  uint64_t written = 0, hits = 0;
  auto check = [&](RandomRound& round) {
    for (KvCommand& cmd : round.cmds) {
      if (cmd.op == KvOp::kStore) {
        EXPECT_EQ(cmd.status, KvStatus::kOk);
      } else if (cmd.status == KvStatus::kOk) {
        ++hits;
        const std::string_view v = store.value(cmd.item);
        EXPECT_EQ(v.substr(0, cmd.key.size() + 1), std::string(cmd.key) + "=");
        store.release(cmd.item);
      }
    }
  };
  for (int r = 0; r < 400; ++r) {
    auto round = std::make_unique<RandomRound>();
    for (int i = 0; i < 50; ++i) {
      const bool set = i % 2 == 0;
      round->keys.push_back(numbered("k", set ? written++ : rng() % (written + 1)));
      round->values.push_back(round->keys.back() + "=" + padding);
    }
    round->cmds.resize(50);
    for (int i = 0; i < 50; ++i) {
      KvCommand& cmd = round->cmds[i];
      cmd.key = round->keys[i];
      if (i % 2 == 0) {
        cmd.op = KvOp::kStore;
        cmd.mode = StoreMode::kSet;
        cmd.value = round->values[i];
      }
      round->ptrs.push_back(&cmd);
    }
    store.run(round->ptrs);
    rounds.push_back(std::move(round));
    if (rounds.size() >= 2) check(*rounds[rounds.size() - 2]);
  }
  store.commit();
  check(*rounds.back());
  EXPECT_GT(store.counters().evictions.load(), 5000u);
  EXPECT_GT(hits, 500u);
}

// What waits for the next index batch: a command that changed a signature's head, or read one its
// round changed. Reads of what the index holds, and misses, are final when the round is resolved.
TEST(KvStore, PipelinedRoundSettlesWhatTheIndexAlreadyHolds) {
  KvStore store(cache_config(xxh3_signature));
  std::vector<KvCommand> first{command(KvOp::kStore, "a", "1")};
  std::vector<KvCommand*> ptrs{&first[0]};
  store.run(ptrs);
  EXPECT_FALSE(first[0].settled);
  EXPECT_TRUE(store.has_pending());
  std::vector<KvCommand> second{command(KvOp::kGet, "a"), command(KvOp::kStore, "b", "2"), command(KvOp::kGet, "b"),
                                command(KvOp::kGet, "c"), command(KvOp::kDelete, "c"), command(KvOp::kDelete, "a")};
  ptrs.clear();
  for (auto& c : second) ptrs.push_back(&c);
  store.run(ptrs);  // writes the first round's set with these searches: "a" is found
  EXPECT_EQ(first[0].status, KvStatus::kOk);
  ASSERT_EQ(second[0].status, KvStatus::kOk);
  EXPECT_EQ(store.value(second[0].item), "1");
  store.release(second[0].item);
  EXPECT_TRUE(second[0].settled);   // read what the index holds
  EXPECT_FALSE(second[1].settled);  // a new head
  EXPECT_FALSE(second[2].settled);  // read the round's own change
  EXPECT_EQ(second[2].status, KvStatus::kOk);
  store.release(second[2].item);
  EXPECT_TRUE(second[3].settled);   // a miss the index answered
  EXPECT_TRUE(second[4].settled);   // deleting nothing changes nothing
  EXPECT_EQ(second[4].status, KvStatus::kNotFound);
  EXPECT_FALSE(second[5].settled);  // unlinks a head
  store.commit();
  EXPECT_FALSE(store.has_pending());
  std::vector<KvCommand> third{command(KvOp::kGet, "a"), command(KvOp::kGet, "b")};
  ptrs = {&third[0], &third[1]};
  store.execute(ptrs);
  EXPECT_EQ(third[0].status, KvStatus::kNotFound);
  ASSERT_EQ(third[1].status, KvStatus::kOk);
  EXPECT_EQ(store.value(third[1].item), "2");
  store.release(third[1].item);
}

TEST(KvStore, CacheEvictsUnderMemoryPressure) {
  KvStore store(cache_config(weak_signature, 4 << 20));
  const std::string value(1000, 'x');
  std::vector<std::string> keys;
  for (int i = 0; i < 20000; ++i) keys.push_back(numbered("k", i));
  for (int i = 0; i < 20000; i += 100) {
    std::vector<KvCommand> cmds(100);
    std::vector<KvCommand*> ptrs;
    for (int j = 0; j < 100; ++j) {
      cmds[j].op = KvOp::kStore;
      cmds[j].key = keys[i + j];
      cmds[j].value = value;
      ptrs.push_back(&cmds[j]);
    }
    store.execute(ptrs);
    for (auto& c : cmds) ASSERT_EQ(c.status, KvStatus::kOk);
  }
  EXPECT_GT(store.counters().evictions.load(), 15000u);
  EXPECT_LT(store.items(), 4500u);
  // The newest keys are there, with their values, after all that chain surgery.
  std::vector<KvCommand> gets(50);
  std::vector<KvCommand*> ptrs;
  for (int j = 0; j < 50; ++j) {
    gets[j].key = keys[19950 + j];
    ptrs.push_back(&gets[j]);
  }
  store.execute(ptrs);
  for (auto& g : gets) {
    ASSERT_EQ(g.status, KvStatus::kOk);
    EXPECT_EQ(store.value(g.item), value);
    store.release(g.item);
  }
}

// Rounds of gets alone, with nothing pending, search and read without a round's machinery
// (KvStore::read_directly): items that flush_all or a past expiry time left in their chains miss
// there too, and a key stored again after them is found with its new value.
TEST(KvStore, RoundsOfGetsMissDeadItems) {
  for (const SignatureFn sig : {xxh3_signature, weak_signature}) {
    KvStore store(cache_config(sig));
    auto run = [&](std::vector<KvCommand>& cmds) {
      std::vector<KvCommand*> ptrs;
      for (KvCommand& c : cmds) ptrs.push_back(&c);
      store.execute(ptrs);
    };
    auto set = [&](const std::string& key, const std::string& value, int64_t exptime) {
      std::vector<KvCommand> cmds(1);
      cmds[0].op = KvOp::kStore;
      cmds[0].key = key;
      cmds[0].value = value;
      cmds[0].exptime = exptime;
      run(cmds);
      ASSERT_EQ(cmds[0].status, KvStatus::kOk) << key;
    };
    auto gets = [&](const std::vector<std::string>& keys) {
      std::vector<KvCommand> cmds(keys.size());
      for (size_t i = 0; i < keys.size(); ++i) cmds[i].key = keys[i];
      run(cmds);
      std::vector<std::string> values;
      for (KvCommand& c : cmds) {
        EXPECT_TRUE(c.settled);
        values.push_back(c.status == KvStatus::kOk ? std::string(store.value(c.item)) : "<miss>");
        if (c.status == KvStatus::kOk) store.release(c.item);
      }
      return values;
    };
    set("a", "1", 0);
    set("b", "2", -1);  // memcached: a negative expiry time is already past
    set("c", "3", 0);
    EXPECT_EQ(gets({"a", "b", "c"}), (std::vector<std::string>{"1", "<miss>", "3"}));
    std::vector<KvCommand> flush(1);
    flush[0].op = KvOp::kFlushAll;
    run(flush);
    EXPECT_EQ(gets({"a", "c", "a"}), (std::vector<std::string>{"<miss>", "<miss>", "<miss>"}));
    set("a", "4", 0);
    EXPECT_EQ(gets({"c", "a"}), (std::vector<std::string>{"<miss>", "4"}));
    EXPECT_EQ(store.counters().get_hits.load(), 3u);
  }
}

// A hit keeps its item from eviction: with no update interval it moves the item to the head of
// its class's LRU (KvStore makes the move when the next round is resolved, or before anything
// reads or changes an LRU); with memcached's 60 s, hits right after the stores move nothing and
// the tail gives the hit items a second chance (KvStore::rescue). Either way evictions take the
// items nobody read, in the order they were stored, whatever rounds the hits, deletes and stores
// came in.
void check_lru_order(uint32_t lru_update_interval) {
  for (const SignatureFn sig : {xxh3_signature, weak_signature}) {
    KvConfig config = cache_config(sig, 4 << 20);
    config.lru_update_interval = lru_update_interval;
    KvStore store(config);
    const std::string value(1000, 'x');
    std::vector<std::string> keys;
    auto run_one = [&](KvCommand& c) {
      KvCommand* p = &c;
      store.run(std::span<KvCommand* const>(&p, 1));
    };
    auto set = [&](const std::string& key) {
      KvCommand c;
      c.op = KvOp::kStore;
      c.key = key;
      c.value = value;
      run_one(c);
      store.commit();
      ASSERT_EQ(c.status, KvStatus::kOk);
    };
    // Whether a key is there, without counting as an access (meta u: no LRU move).
    auto present = [&](const std::string& key) {
      KvCommand c;
      c.key = key;
      c.bump = false;
      c.want_value = false;
      run_one(c);
      store.commit();
      return c.status == KvStatus::kOk;
    };
    // Fill the cache until it evicts, then find the oldest item still there.
    while (store.counters().evictions.load() == 0) {
      keys.push_back(numbered("k", keys.size()));
      set(keys.back());
    }
    size_t oldest = 0;
    while (!present(keys[oldest])) ++oldest;
    // Hits on every other one of the 20 oldest, each its own round, left pending between rounds
    // (no commit); one of them then deleted (its pending move runs before the unlink).
    std::vector<KvCommand> hits(10);
    for (size_t i = 0; i < hits.size(); ++i) {
      hits[i].key = keys[oldest + 2 * i];
      run_one(hits[i]);
      ASSERT_EQ(hits[i].status, KvStatus::kOk) << hits[i].key;
    }
    store.commit();
    for (KvCommand& h : hits) store.release(h.item);
    KvCommand del;
    del.op = KvOp::kDelete;
    del.key = keys[oldest + 18];
    run_one(del);
    store.commit();
    ASSERT_EQ(del.status, KvStatus::kOk);
    // 25 more items evict the 25 least recently used: the 10 unread among the oldest 20 first.
    const uint64_t evicted = store.counters().evictions.load();
    for (int i = 0; i < 25; ++i) {
      keys.push_back(numbered("k", keys.size()));
      set(keys.back());
    }
    ASSERT_GE(store.counters().evictions.load() - evicted, 10u);
    for (size_t i = 0; i < 20; ++i) {
      const std::string& key = keys[oldest + i];
      if (i == 18) EXPECT_FALSE(present(key)) << key << " was deleted";
      else if (i % 2 == 0) EXPECT_TRUE(present(key)) << key << " was read: it should have been kept";
      else EXPECT_FALSE(present(key)) << key << " was not read: it should have been evicted first";
    }
  }
}

TEST(KvStore, HitsKeepTheirItemsFromEvictionInLruOrder) { check_lru_order(0); }
TEST(KvStore, HitsWithinTheUpdateIntervalKeepTheirItemsAtTheTail) { check_lru_order(60); }

TEST(KvStore, StoreModeFullSaysOutOfMemoryAndNeverEvicts) {
  const std::string pool = pool_name("full");
  remove_pool(pool);
  {
    KvConfig c = cache_config(xxh3_signature, 2 << 20);
    c.mode = Mode::kStore;
    c.pool = pool;
    KvStore store(c);
    const std::string value(1000, 'y');
    std::vector<std::string> keys;
    for (int i = 0; i < 4000; ++i) keys.push_back(numbered("s", i));
    size_t stored = 0, refused = 0;
    for (int i = 0; i < 4000; i += 100) {
      std::vector<KvCommand> cmds(100);
      std::vector<KvCommand*> ptrs;
      for (int j = 0; j < 100; ++j) {
        cmds[j].op = KvOp::kStore;
        cmds[j].key = keys[i + j];
        cmds[j].value = value;
        ptrs.push_back(&cmds[j]);
      }
      store.execute(ptrs);
      for (auto& cmd : cmds) (cmd.status == KvStatus::kOk ? stored : refused)++;
      for (auto& cmd : cmds) ASSERT_TRUE(cmd.status == KvStatus::kOk || cmd.status == KvStatus::kOutOfMemory);
    }
    EXPECT_GT(refused, 0u);
    EXPECT_EQ(store.items(), stored);
    EXPECT_EQ(store.counters().evictions.load(), 0u);
  }
  remove_pool(pool);
}

// A child writes rounds in store mode and dies without closing anything (as under kill -9);
// every round it reported done must be there after the parent reopens, with colliding chains.
TEST(KvStore, StoreModeRecoversAfterCrash) {
  const std::string pool = pool_name("crash");
  remove_pool(pool);
  KvConfig c = cache_config(weak_signature, 16 << 20);
  c.mode = Mode::kStore;
  c.pool = pool;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    KvStore* store = new KvStore(c);  // never destroyed: the pool is not closed
    std::mt19937_64 rng(7);
    // Rounds run as the server runs them (KvStore::run): a command is reported once it is final,
    // a settled one at once, the others after the next round's batch. The last round's unsettled
    // commands were never final: "?" (present or not after the crash, both are right).
    std::vector<KvCommand> previous;
    std::vector<std::string> previous_keys, previous_values;
    std::vector<bool> previous_reported;
    auto line = [](const KvCommand& cmd, const std::string& key, const std::string& value) {
      return key + " " + (cmd.op == KvOp::kDelete ? std::string("-") : value) + "\n";
    };
    for (int round = 0; round < 400; ++round) {
      std::vector<KvCommand> cmds(20);
      std::vector<std::string> keys(20), values(20);
      std::vector<KvCommand*> ptrs;
      for (int j = 0; j < 20; ++j) {
        keys[j] = numbered("key", rng() % 300);
        values[j] = numbered("r", static_cast<uint64_t>(round));
        values[j].append(1 + rng() % 200, 'v');
        cmds[j].op = rng() % 5 == 0 ? KvOp::kDelete : KvOp::kStore;
        cmds[j].key = keys[j];
        cmds[j].value = values[j];
        ptrs.push_back(&cmds[j]);
      }
      store->run(ptrs);
      std::string report;
      for (size_t j = 0; j < previous.size(); ++j)
        if (!previous_reported[j]) report += previous[j].settled ? line(previous[j], previous_keys[j], previous_values[j]) : "! " + previous_keys[j] + "\n";
      std::vector<bool> reported(20);
      for (int j = 0; j < 20; ++j)
        if ((reported[j] = cmds[j].settled)) report += line(cmds[j], keys[j], values[j]);
      [[maybe_unused]] ssize_t w = write(fds[1], report.data(), report.size());
      previous = std::move(cmds);
      previous_keys = std::move(keys);
      previous_values = std::move(values);
      previous_reported = std::move(reported);
    }
    std::string maybe;
    for (size_t j = 0; j < previous.size(); ++j)
      if (!previous_reported[j]) maybe += "? " + previous_keys[j] + "\n";
    [[maybe_unused]] ssize_t w = write(fds[1], maybe.data(), maybe.size());
    _exit(0);  // no destructor: the index is left open, as after a crash
  }
  close(fds[1]);
  std::string all;
  char buf[65536];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) all.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  std::map<std::string, std::string> expect;
  std::set<std::string> maybe;
  for (size_t at = 0; at < all.size();) {
    const size_t nl = all.find('\n', at);
    const std::string line = all.substr(at, nl - at);
    at = nl + 1;
    const size_t sp = line.find(' ');
    const std::string key = line.substr(0, sp), value = line.substr(sp + 1);
    if (key == "!") ADD_FAILURE() << value << ": not final after the next round's batch";
    else if (key == "?") maybe.insert(value);
    else if (value == "-") expect.erase(key);
    else expect[key] = value;
  }
  EXPECT_GT(expect.size(), 100u);
  {
    KvStore store(c);
    EXPECT_TRUE(store.recovery().recovered);
    EXPECT_GE(store.items() + maybe.size(), expect.size());
    EXPECT_LE(store.items(), expect.size() + maybe.size());
    std::vector<KvCommand> gets(300);
    std::vector<std::string> keys(300);
    std::vector<KvCommand*> ptrs;
    for (int i = 0; i < 300; ++i) {
      keys[i] = numbered("key", i);
      gets[i].key = keys[i];
      ptrs.push_back(&gets[i]);
    }
    store.execute(ptrs);
    for (int i = 0; i < 300; ++i) {
      if (maybe.count(keys[i])) {
        if (gets[i].status == KvStatus::kOk) store.release(gets[i].item);
        continue;
      }
      auto it = expect.find(keys[i]);
      if (it == expect.end()) {
        EXPECT_EQ(gets[i].status, KvStatus::kNotFound) << keys[i];
      } else {
        ASSERT_EQ(gets[i].status, KvStatus::kOk) << keys[i];
        EXPECT_EQ(store.value(gets[i].item), it->second);
        store.release(gets[i].item);
      }
    }
  }
  remove_pool(pool);
}

namespace {

// Store mode: round r stores "k<r>" and sets "last" to r, so a consistent image holds exactly
// k0..k<last>.
KvConfig store_config(const std::string& pool, SignatureFn sig = xxh3_signature) {
  KvConfig c = cache_config(sig, 32 << 20);
  c.mode = Mode::kStore;
  c.pool = pool;
  return c;
}

void run_numbered_round(KvStore& store, uint64_t r) {
  std::string key = numbered("k", r), value = numbered("v", r), last = std::to_string(r);
  value.append(r % 300, 'x');
  KvCommand cmds[2];
  cmds[0].op = cmds[1].op = KvOp::kStore;
  cmds[0].key = key;
  cmds[0].value = value;
  cmds[1].key = "last";
  cmds[1].value = last;
  KvCommand* ptrs[2] = {&cmds[0], &cmds[1]};
  store.execute(ptrs);
  ASSERT_EQ(cmds[0].status, KvStatus::kOk);
  ASSERT_EQ(cmds[1].status, KvStatus::kOk);
}

// Returns "last" and checks that k0..k<last> hold their values and k<last + 1> is absent.
uint64_t check_numbered(KvStore& store) {
  KvCommand last;
  last.key = "last";
  KvCommand* p = &last;
  store.execute({&p, 1});
  EXPECT_EQ(last.status, KvStatus::kOk);
  if (last.status != KvStatus::kOk) return 0;
  const uint64_t n = std::stoull(std::string(store.value(last.item)));
  store.release(last.item);
  std::vector<KvCommand> gets(n + 2);
  std::vector<std::string> keys(n + 2);
  std::vector<KvCommand*> ptrs;
  for (uint64_t r = 0; r < n + 2; ++r) {
    keys[r] = numbered("k", r);
    gets[r].key = keys[r];
    ptrs.push_back(&gets[r]);
  }
  store.execute(ptrs);
  for (uint64_t r = 0; r <= n; ++r) {
    EXPECT_EQ(gets[r].status, KvStatus::kOk) << keys[r];
    if (gets[r].status != KvStatus::kOk) continue;
    std::string want = numbered("v", r);
    want.append(r % 300, 'x');
    EXPECT_EQ(store.value(gets[r].item), want);
    store.release(gets[r].item);
  }
  EXPECT_EQ(gets[n + 1].status, KvStatus::kNotFound) << "a snapshot holds a round after its last one";
  return n;
}

// Restores snapshot i of dir/s0..s3 (taken once 300 (i + 1) rounds had run) as `copy`: each holds
// whole rounds, k0..k<last> exactly, and the four follow each other.
void expect_whole_rounds_restored(const std::string& dir, const std::string& copy) {
  std::vector<uint64_t> restored_last;
  for (int i = 0; i < 4; ++i) {
    remove_pool(copy);
    gphash::Table::restore(dir + "/s" + std::to_string(i), copy + ".index");
    KvStore restored(store_config(copy, weak_signature));
    EXPECT_TRUE(restored.recovery().recovered);
    const uint64_t last = check_numbered(restored);
    EXPECT_GE(last + 1, 300u * (i + 1)) << "snapshot " << i;
    EXPECT_EQ(restored.items(), last + 2) << "snapshot " << i;
    restored_last.push_back(last);
  }
  EXPECT_TRUE(std::is_sorted(restored_last.begin(), restored_last.end()));
}

}  // namespace

// Snapshots taken while rounds run hold whole rounds: each restores to k0..k<last> exactly, items
// and index agreeing (the items live in the index pool's attachment, one image for both).
TEST(KvStore, SnapshotsWhileRoundsRunRestoreWholeRounds) {
  const std::string pool = pool_name("snap"), copy = pool_name("snapcopy");
  const std::string dir = "/tmp/" + pool;
  remove_pool(pool);
  ASSERT_EQ(system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  {
    KvStore store(store_config(pool, weak_signature));  // long chains: rounds change items in place
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> rounds{0};
    std::thread scheduler([&] {
      for (uint64_t r = 0; !stop && r < 3000; ++r) {  // chains of 1,500 items: rounds slow down
        run_numbered_round(store, r);
        rounds = r + 1;
      }
    });
    for (int i = 0; i < 4; ++i) {
      while (rounds < 300u * (i + 1)) std::this_thread::yield();  // snapshots while rounds run
      store.table().snapshot(dir + "/s" + std::to_string(i));
    }
    stop = true;
    scheduler.join();
  }
  expect_whole_rounds_restored(dir, copy);
  remove_pool(pool);
  remove_pool(copy);
  ASSERT_EQ(system(("rm -rf " + dir).c_str()), 0);
}

// Pipelined, rounds back to back leave no moment without a resolved round's changes on their
// way; a snapshot that waits makes the store drain (KvStore::run), so it is taken while rounds
// keep coming, and holds whole rounds.
TEST(KvStore, SnapshotsOfAPipelinedStoreRestoreWholeRounds) {
  const std::string pool = pool_name("psnap"), copy = pool_name("psnapcopy");
  const std::string dir = "/tmp/" + pool;
  remove_pool(pool);
  ASSERT_EQ(system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  struct NumberedRound {
    std::string key, value, last;
    KvCommand cmds[2];
    KvCommand* ptrs[2];
    explicit NumberedRound(uint64_t r) : key(numbered("k", r)), value(numbered("v", r)), last(std::to_string(r)) {
      value.append(r % 300, 'x');
      for (int i = 0; i < 2; ++i) cmds[i].op = KvOp::kStore, ptrs[i] = &cmds[i];
      cmds[0].key = key, cmds[0].value = value;
      cmds[1].key = "last", cmds[1].value = last;
    }
  };
  constexpr uint64_t kRounds = 20000;
  {
    KvConfig config = store_config(pool, weak_signature);
    config.pipeline = true;
    KvStore store(config);
    ASSERT_TRUE(store.pipelined());
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> rounds{0};
    std::thread scheduler([&] {
      std::deque<NumberedRound> live;  // commands stay alive until settled
      for (uint64_t r = 0; !stop && r < kRounds; ++r) {
        live.emplace_back(r);
        store.run(live.back().ptrs);
        while (!live.empty() && live.front().cmds[0].settled && live.front().cmds[1].settled) {
          EXPECT_EQ(live.front().cmds[0].status, KvStatus::kOk);
          EXPECT_EQ(live.front().cmds[1].status, KvStatus::kOk);
          live.pop_front();
        }
        rounds = r + 1;
      }
      store.commit();
      for (const NumberedRound& n : live) EXPECT_TRUE(n.cmds[0].settled && n.cmds[1].settled);
    });
    for (int i = 0; i < 4; ++i) {
      while (rounds < 300u * (i + 1)) std::this_thread::yield();  // snapshots while rounds run
      store.table().snapshot(dir + "/s" + std::to_string(i));
    }
    const uint64_t at_last_snapshot = rounds;
    stop = true;
    scheduler.join();
    // Draining, the four were taken within some 2,000 rounds on the development VM; starved, they
    // wait for the last round.
    EXPECT_LT(at_last_snapshot, kRounds) << "the snapshots waited for the rounds to stop";
  }
  expect_whole_rounds_restored(dir, copy);
  remove_pool(pool);
  remove_pool(copy);
  ASSERT_EQ(system(("rm -rf " + dir).c_str()), 0);
}

// A store of the earlier layout (items in NAME.items beside the index) is moved into the pool at
// open, keeping every item; a crash during the move repeats it, because the file stays the store
// until its copy is durable.
TEST(KvStore, AdoptsTheItemFileOfTheEarlierLayout) {
  const std::string pool = pool_name("legacy");
  const std::string index = "/dev/shm/" + pool + ".index", items = "/dev/shm/" + pool + ".items";
  remove_pool(pool);
  {
    KvStore store(store_config(pool));
    for (uint64_t r = 0; r < 500; ++r) run_numbered_round(store, r);
  }
  {
    // Make the earlier layout: the region's bytes in NAME.items, no attachment in the header.
    gphash::Table t = gphash::Table::open(pool + ".index");
    const std::span<std::byte> a = t.attachment();
    ASSERT_FALSE(a.empty());
    FILE* f = std::fopen(items.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(a.data(), 1, a.size(), f), a.size());
    std::fclose(f);
    t.close();
    auto p = gphash::pool::Pool::open(pool + ".index", {});
    gphash::format::PoolHeader h = p->header();
    h.attachment_offset = h.attachment_bytes = 0;
    p->write_header(h);
  }
  {
    KvStore store(store_config(pool));
    EXPECT_EQ(check_numbered(store), 499u);
    EXPECT_EQ(store.items(), 501u);
  }
  EXPECT_NE(access(items.c_str(), F_OK), 0) << "the item file is removed once adopted";
  {
    KvStore store(store_config(pool));  // and it stays adopted
    EXPECT_EQ(check_numbered(store), 499u);
  }
  remove_pool(pool);
}

// The cheap clock of the time breakdowns reads nanoseconds (the TSC, calibrated at first use).
TEST(TickClock, MeasuresASleepInNanoseconds) {
  const uint64_t start = TickClock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const uint64_t ns = TickClock::ns_since(start);
  EXPECT_GE(ns, 29'000'000u);
  EXPECT_LT(ns, 200'000'000u);  // generous: a loaded CI machine may oversleep
}

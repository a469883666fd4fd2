// Helpers of the snapshot tests: a temporary directory on a real file system, a seeded workload
// checked against the model, a hand-built table whose Snapshotter a test controls, and a check
// that a table holds exactly a model's items.
#pragma once

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <random>
#include <shared_mutex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engines/common/table_meta.h"
#include "engines/cpu/cpu_engine.h"
#include "gphash/table.h"
#include "pool/pool.h"
#include "snapshot/snapshotter.h"
#include "test_util.h"

namespace gphash::testing {

// A directory under /tmp (a real file system) unique to this process, removed with its content.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    static int counter = 0;
    path_ = "/tmp/gphash-snapshot-test-" + std::to_string(getpid()) + "-" + tag + "-" + std::to_string(counter++);
    mkdir(path_.c_str(), 0700);
  }
  ~TempDir() {
    nftw(path_.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
         FTW_DEPTH | FTW_PHYS);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Seeded batches of mixed operations over a fixed universe of 8-byte keys: batch i of a workload
// is a pure function of (seed, i), so a parent process can replay what a child ran.
class Workload {
 public:
  Workload(uint64_t seed, uint32_t value_width, size_t universe = 20000, size_t max_batch = 800)
      : seed_(seed), value_width_(value_width), universe_(universe), max_batch_(max_batch) {}

  struct Prepared {
    std::vector<Op> ops;
    std::vector<uint64_t> keys;
    std::string values, out;
    std::vector<OpStatus> status;
    Batch batch;
  };
  Prepared make(uint64_t index) const {
    std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + index);
    Prepared p;
    const size_t n = 1 + rng() % max_batch_;
    p.ops.resize(n);
    p.keys.resize(n);
    p.values.assign(n * value_width_, '\0');
    p.out.assign(n * value_width_, '\0');
    p.status.resize(n);
    const bool growing = index < 40;  // early batches mostly insert, so the table resizes
    for (size_t i = 0; i < n; ++i) {
      const uint64_t r = rng() % 10;
      p.ops[i] = r < (growing ? 6u : 3u) ? Op::kUpsert : r < 7 ? Op::kUpdate : r < 8 ? Op::kErase : r < 9 ? Op::kInsert : Op::kSearch;
      p.keys[i] = 1 + rng() % universe_;
      const std::string v = random_bytes(rng, value_width_);
      std::memcpy(p.values.data() + i * value_width_, v.data(), value_width_);
    }
    p.batch.size = n;
    p.batch.key_width = 8;
    p.batch.value_width = value_width_;
    p.batch.ops = p.ops.data();
    p.batch.keys = p.keys.data();
    p.batch.values = p.values.data();
    p.batch.values_out = p.out.data();
    p.batch.status = p.status.data();
    return p;
  }
  // Advances the model by batch `index` (as an acknowledged batch does).
  void apply_to_model(uint64_t index, Model& model) const {
    Prepared p = make(index);
    for (size_t i = 0; i < p.ops.size(); ++i) {
      std::string found;
      model.apply(p.ops[i], key_string(p.keys[i]), std::string(p.values.data() + i * value_width_, value_width_), &found);
    }
  }
  // Runs batch `index` on `t` (anything with execute(Batch)) and checks its statuses and search
  // results against the model, which it advances.
  template <class T>
  void run(T& t, uint64_t index, Model& model) const {
    Prepared p = make(index);
    t.execute(p.batch);
    for (size_t i = 0; i < p.ops.size(); ++i) {
      std::string found;
      const OpStatus want =
          model.apply(p.ops[i], key_string(p.keys[i]), std::string(p.values.data() + i * value_width_, value_width_), &found);
      ASSERT_EQ(p.status[i], want) << "batch " << index << " op " << i;
      if (p.ops[i] == Op::kSearch && want == OpStatus::kOk) {
        ASSERT_EQ(p.out.substr(i * value_width_, value_width_), found);
      }
    }
  }
  uint32_t value_width() const { return value_width_; }
  static std::string key_string(uint64_t k) { return std::string(reinterpret_cast<const char*>(&k), 8); }

 private:
  uint64_t seed_;
  uint32_t value_width_;
  size_t universe_, max_batch_;
};

// How many of the model's items the table lacks or holds with another value.
inline size_t items_differing(Table& t, const Model& model) {
  const uint32_t vw = t.value_width();
  std::vector<uint64_t> keys;
  std::vector<std::string> want;
  for (const auto& [k, v] : model.map()) {
    uint64_t key;
    std::memcpy(&key, k.data(), 8);
    keys.push_back(key);
    want.push_back(v);
  }
  if (keys.empty()) return 0;
  std::string out(keys.size() * vw, '\0');
  std::vector<OpStatus> status(keys.size());
  Batch b;
  b.size = keys.size();
  b.key_width = 8;
  b.value_width = vw;
  b.keys = keys.data();
  b.values_out = out.data();
  b.status = status.data();
  t.execute(b);
  size_t bad = 0;
  for (size_t i = 0; i < keys.size(); ++i)
    if (status[i] != OpStatus::kOk || out.compare(i * vw, vw, want[i]) != 0) ++bad;
  return bad;
}

inline bool holds_exactly(Table& t, const Model& model) { return t.size() == model.size() && items_differing(t, model) == 0; }

// The table holds exactly the model's items (the count, and every key with its value).
inline void expect_same_items(Table& t, const Model& model, const std::string& what) {
  ASSERT_EQ(t.size(), model.size()) << what;
  EXPECT_EQ(items_differing(t, model), 0u) << what << ": of " << model.size() << " items";
}

// The parts of gphash::Table a snapshot works with, built by hand, so that a test can give the
// Snapshotter its own FileSystem and switch the engine's write tracking off.
struct HandTable {
  std::unique_ptr<pool::Pool> pool;
  std::unique_ptr<engine::Engine> engine;
  std::shared_mutex batches;

  HandTable(const std::string& path, const TableConfig& config, int threads = 2) {
    pool = pool::Pool::create(path, {});
    engine::TableMeta::initialize(*pool, config);
    pool->publish();
    OpenOptions o;
    o.threads = threads;
    engine = engine::make_cpu_engine(*pool, o);
  }
  ~HandTable() { engine->close(); }
  // What Table::execute does around a writing batch, minus the checks.
  void execute(const Batch& b) {
    std::unique_lock lock(batches);
    uint64_t writes = 0;
    for (size_t i = 0; i < b.size; ++i) writes += (b.ops ? b.ops[i] : b.op) != Op::kSearch;
    snapshot::count_pool_writes(*pool, writes);
    engine->execute(b);
  }
  size_t size() const { return engine->item_count(); }
};

}  // namespace gphash::testing

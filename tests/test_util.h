// Helpers shared by the tests: unique pool paths that clean up after themselves, and a model of
// the batch semantics (gphash/ops.h) on std::unordered_map.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <gtest/gtest.h>

#include "gphash/ops.h"
#include "gphash/table.h"

namespace gphash::testing {

// A /dev/shm path unique to this process and test, removed (with any leftovers) on destruction.
class TempPool {
 public:
  explicit TempPool(const std::string& tag) {
    static std::atomic<int> counter{0};
    path_ = "/dev/shm/gphash-test-" + std::to_string(getpid()) + "-" + tag + "-" + std::to_string(counter++);
    std::remove(path_.c_str());
  }
  ~TempPool() { std::remove(path_.c_str()); }
  TempPool(const TempPool&) = delete;
  TempPool& operator=(const TempPool&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Whether the GPU engine can run here (a build with CUDA and a usable GPU).
inline bool have_gpu() {
  OpenOptions o;
  o.engine = EngineKind::kGpu;
  try {
    Table::create("mem:", {}, o);
    return true;
  } catch (const Error& e) {
    return false;
  }
}

// The reference: applies operations one at a time, in order.
class Model {
 public:
  OpStatus apply(Op op, const std::string& key, const std::string& value, std::string* out) {
    auto it = map_.find(key);
    switch (op) {
      case Op::kSearch:
        if (it == map_.end()) return OpStatus::kNotFound;
        *out = it->second;
        return OpStatus::kOk;
      case Op::kInsert:
        if (it != map_.end()) return OpStatus::kExists;
        map_.emplace(key, value);
        return OpStatus::kOk;
      case Op::kUpsert:
        map_[key] = value;
        return OpStatus::kOk;
      case Op::kUpdate:
        if (it == map_.end()) return OpStatus::kNotFound;
        it->second = value;
        return OpStatus::kOk;
      case Op::kErase:
        if (it == map_.end()) return OpStatus::kNotFound;
        map_.erase(it);
        return OpStatus::kOk;
    }
    return OpStatus::kNotFound;
  }
  size_t size() const { return map_.size(); }
  const std::unordered_map<std::string, std::string>& map() const { return map_; }

 private:
  std::unordered_map<std::string, std::string> map_;
};

inline std::string random_bytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    uint64_t w = rng();
    std::memcpy(s.data() + i, &w, std::min<size_t>(8, n - i));
  }
  return s;
}

// Every key of `model` is found in `table` with its value (one batch of searches).
inline void expect_table_holds_model(Table& table, const Model& model, uint32_t key_width, uint32_t value_width) {
  const size_t m = model.size();
  std::vector<uint64_t> kwords(m * key_width / 8 + 1);
  std::string out(m * value_width, '\0');
  std::vector<std::string> want;
  size_t at = 0;
  for (const auto& [k, v] : model.map()) {
    std::memcpy(reinterpret_cast<char*>(kwords.data()) + at, k.data(), key_width);
    at += key_width;
    want.push_back(v);
  }
  std::vector<OpStatus> status(m);
  Batch b;
  b.size = m;
  b.key_width = key_width;
  b.value_width = value_width;
  b.keys = kwords.data();
  b.values_out = out.data();
  b.status = status.data();
  table.execute(b);
  for (size_t i = 0; i < m; ++i) {
    ASSERT_EQ(status[i], OpStatus::kOk);
    ASSERT_TRUE(std::string(out.data() + i * value_width, value_width) == want[i]) << "value differs at " << i;
  }
}

// Batches of 8-byte keys with values derived from the keys, for any value width.
namespace batches {

// Runs `f`, which must throw gphash::Error with `code` (and field `field` when given).
template <class F>
void expect_error(F&& f, ErrorCode code, const std::string& field = {}, const char* what = "") {
  try {
    f();
    ADD_FAILURE() << what << ": no error, expected " << to_string(code);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << what << ": got " << to_string(e.code()) << " (" << e.what() << ")";
    if (!field.empty()) {
      EXPECT_EQ(e.field(), field) << what << ": " << e.what();
    }
  }
}

// 8-byte keys 1..n (or from `first`) and values derived from them, for any value width.
inline std::string value_for(uint64_t key, uint32_t width) {
  std::string v(width, '\0');
  std::mt19937_64 rng(key * 0x9E3779B97F4A7C15ull + width);
  for (uint32_t i = 0; i < width; i += 8) {
    uint64_t w = rng();
    std::memcpy(v.data() + i, &w, std::min<uint32_t>(8, width - i));
  }
  return v;
}

// One batch of `op` on `keys`; returns the statuses (values_out into *out when given).
inline std::vector<OpStatus> run(Table& t, Op op, const std::vector<uint64_t>& keys, std::string* out = nullptr) {
  const uint32_t vw = t.value_width();
  std::string values(keys.size() * vw, '\0');
  for (size_t i = 0; i < keys.size(); ++i) std::memcpy(values.data() + i * vw, value_for(keys[i], vw).data(), vw);
  std::vector<OpStatus> status(keys.size());
  if (out) out->assign(keys.size() * vw, '\0');
  Batch b;
  b.size = keys.size();
  b.key_width = 8;
  b.value_width = vw;
  b.op = op;
  b.keys = keys.data();
  b.values = op == Op::kSearch || op == Op::kErase ? nullptr : values.data();
  b.values_out = out ? out->data() : nullptr;
  b.status = status.data();
  t.execute(b);
  return status;
}

inline std::vector<uint64_t> key_range(uint64_t first, uint64_t n) {
  std::vector<uint64_t> k(n);
  for (uint64_t i = 0; i < n; ++i) k[i] = first + i;
  return k;
}

// Every key is present with value_for(key).
inline void expect_present(Table& t, const std::vector<uint64_t>& keys) {
  if (keys.empty()) return;
  std::string out;
  auto st = run(t, Op::kSearch, keys, &out);
  const uint32_t vw = t.value_width();
  size_t bad = 0;
  for (size_t i = 0; i < keys.size(); ++i)
    if (st[i] != OpStatus::kOk || out.compare(i * vw, vw, value_for(keys[i], vw)) != 0) {
      if (++bad <= 5) {
        ADD_FAILURE() << "key " << keys[i] << ": " << to_string(st[i]);
      }
    }
  EXPECT_EQ(bad, 0u) << "of " << keys.size() << " keys";
}

inline void expect_absent(Table& t, const std::vector<uint64_t>& keys) {
  auto st = run(t, Op::kSearch, keys);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(st[i], OpStatus::kNotFound) << "key " << keys[i];
}

}  // namespace batches

}  // namespace gphash::testing

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

}  // namespace gphash::testing

// An in-memory FileSystem (src/snapshot/file_system.h) for the snapshot fault tests, the way
// the shadow memory of tests/crash is for pool stores. It knows what is durable: a file's data
// and size once the file is synced, a directory's names once the directory is synced. Every
// call that changes something is a numbered step, and a test can
//   - fail step N with a typed error (nothing happens: a full disk, an I/O error), or
//   - cut the power at step N (it throws PowerCut; nothing happens), then take crash_image():
//     the file system as a reboot would find it, keeping no unsynced write at all, a random
//     subset of them (a disk that reorders writes), or a random subset of their 512-byte sectors
//     (one that also tears them).
#pragma once

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gphash/error.h"
#include "snapshot/file_system.h"

namespace gphash::testing {

struct PowerCut {};  // thrown at the step the power is cut

class FaultFileSystem final : public snapshot::FileSystem {
 public:
  enum class Lost { kAllUnsynced, kRandomWrites, kRandomSectors };

  int64_t fail_step = -1;  // the step that fails, -1 for none
  ErrorCode fail_code = ErrorCode::kIo;
  int64_t cut_step = -1;   // the step at which the power is cut, -1 for none
  uint64_t steps() const { return steps_; }

  // The file system after a power cut: the synced state, plus a random subset of the unsynced
  // writes (kRandomWrites) or of their sectors (kRandomSectors), applied in order.
  FaultFileSystem crash_image(Lost lost, std::mt19937_64& rng) const {
    FaultFileSystem image;
    for (const auto& [path, id] : durable_names_) image.names_[path] = id;
    image.durable_names_ = image.names_;
    for (const auto& [id, inode] : inodes_) {
      Inode& copy = image.inodes_[id];
      copy.data = inode.durable;
      if (lost != Lost::kAllUnsynced)
        for (const Pending& w : inode.pending) {
          if (w.truncate) {
            if (rng() % 2) copy.data.resize(w.offset, '\0');
            continue;
          }
          const bool whole = lost == Lost::kRandomWrites, keep = rng() % 2;
          for (uint64_t at = w.offset; at < w.offset + w.bytes.size(); at = (at / 512 + 1) * 512) {
            if (whole ? !keep : rng() % 2) continue;
            const uint64_t end = std::min<uint64_t>(w.offset + w.bytes.size(), (at / 512 + 1) * 512);
            if (copy.data.size() < end) copy.data.resize(end, '\0');
            std::memcpy(copy.data.data() + at, w.bytes.data() + (at - w.offset), end - at);
          }
        }
      copy.durable = copy.data;
    }
    image.next_id_ = next_id_;
    return image;
  }

  std::string contents(const std::string& path) const { return inodes_.at(names_.at(path)).data; }
  void set_contents(const std::string& path, const std::string& data) {
    Inode& i = inodes_[names_.at(path)];
    i.data = i.durable = data;
  }

  // ---- snapshot::FileSystem ---------------------------------------------------------------
  std::unique_ptr<snapshot::File> open_read(const std::string& path) override { return open(path); }
  std::unique_ptr<snapshot::File> open_write(const std::string& path) override { return open(path); }
  std::unique_ptr<snapshot::File> create(const std::string& path, uint32_t) override {
    step();
    if (names_.count(path)) throw Error(ErrorCode::kPoolExists, path + " exists");
    names_[path] = next_id_;
    inodes_[next_id_];
    return std::make_unique<FaultFile>(*this, next_id_++, path);
  }
  bool exists(const std::string& path) override { return names_.count(path) != 0; }
  void rename(const std::string& from, const std::string& to) override {
    step();
    auto it = names_.find(from);
    if (it == names_.end()) throw Error(ErrorCode::kNotFound, from + ": no such file");
    names_[to] = it->second;
    names_.erase(from);
  }
  void remove(const std::string& path) override {
    step();
    names_.erase(path);
  }
  void sync_dir(const std::string& dir) override {
    step();
    const std::string prefix = dir + "/";
    for (auto it = durable_names_.begin(); it != durable_names_.end();)
      it = it->first.compare(0, prefix.size(), prefix) == 0 ? durable_names_.erase(it) : std::next(it);
    for (const auto& [path, id] : names_)
      if (path.compare(0, prefix.size(), prefix) == 0) durable_names_[path] = id;
  }
  std::vector<std::string> list_dir(const std::string& dir) override {
    std::vector<std::string> r;
    for (const auto& [path, id] : names_)
      if (snapshot::parent_dir(path) == dir) r.push_back(snapshot::base_name(path));
    return r;
  }
  bool process_alive(long) override { return false; }

 private:
  struct Pending {
    uint64_t offset;
    std::string bytes;
    bool truncate = false;
  };
  struct Inode {
    std::string data, durable;
    std::vector<Pending> pending;
  };

  class FaultFile final : public snapshot::File {
   public:
    FaultFile(FaultFileSystem& fs, uint64_t id, std::string path) : fs_(fs), id_(id), path_(std::move(path)) {}
    size_t read_at(uint64_t offset, void* buffer, size_t n) override {
      const std::string& d = inode().data;
      if (offset >= d.size()) return 0;
      const size_t got = std::min<size_t>(n, d.size() - offset);
      std::memcpy(buffer, d.data() + offset, got);
      return got;
    }
    void write_at(uint64_t offset, const void* data, size_t n) override {
      fs_.step();
      Inode& i = inode();
      if (i.data.size() < offset + n) i.data.resize(offset + n, '\0');
      std::memcpy(i.data.data() + offset, data, n);
      i.pending.push_back({offset, std::string(static_cast<const char*>(data), n)});
    }
    uint64_t size() override { return inode().data.size(); }
    void truncate(uint64_t size) override {
      fs_.step();
      inode().data.resize(size, '\0');
      inode().pending.push_back({size, {}, true});
    }
    void sync() override {
      fs_.step();
      inode().durable = inode().data;
      inode().pending.clear();
    }
    bool try_lock() override { return true; }

   private:
    Inode& inode() { return fs_.inodes_.at(id_); }
    FaultFileSystem& fs_;
    uint64_t id_;
    std::string path_;
  };

  std::unique_ptr<snapshot::File> open(const std::string& path) {
    auto it = names_.find(path);
    if (it == names_.end()) throw Error(ErrorCode::kNotFound, path + ": no such file");
    return std::make_unique<FaultFile>(*this, it->second, path);
  }
  void step() {
    const int64_t n = static_cast<int64_t>(steps_++);
    if (n == cut_step) throw PowerCut{};
    if (n == fail_step) throw Error(fail_code, "injected failure at step " + std::to_string(n));
  }

  std::map<std::string, uint64_t> names_, durable_names_;
  std::map<uint64_t, Inode> inodes_;
  uint64_t next_id_ = 1;
  uint64_t steps_ = 0;
};

}  // namespace gphash::testing

// The server's key-value layer without a network: what one command costs in a round (the part of
// gphash-server that runs one round at a time per partition), for rounds of a few commands (one
// request in flight on many connections) up to many (multi-gets). CPU engine, cache mode, one
// index thread, as the server runs it. Keys of 16 bytes, chosen uniformly from those preloaded.
//
//   kv_round_bench [--keys 100000] [--value-size 32] [--get-ratio 0.95] [--rounds 1,2,4,16,64]
//                  [--seconds 1] [--json FILE]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_store.h"

namespace {

using gphash::kv::KvCommand;
using gphash::kv::KvOp;
using gphash::kv::KvStatus;
using gphash::kv::KvStore;


// Gives back the items the round's gets hold (the server's workers do so after the reply).
void release(const KvStore& store, std::span<KvCommand> cmds) {
  for (KvCommand& c : cmds)
    if (c.op == KvOp::kGet && c.status == KvStatus::kOk && c.item) store.release(c.item);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gphash-server's key-value layer: time per command in rounds of a given size"};
  uint64_t keys = 100000;
  uint32_t value_size = 32;
  double get_ratio = 0.95, seconds = 1;
  std::vector<size_t> round_sizes{1, 2, 4, 16, 64};
  std::string json_path;
  app.add_option("--keys", keys, "keys preloaded");
  app.add_option("--value-size", value_size, "bytes per value");
  app.add_option("--get-ratio", get_ratio, "share of gets (the rest are sets)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--rounds", round_sizes, "commands per round")->delimiter(',');
  app.add_option("--seconds", seconds, "time per round size");
  app.add_option("--json", json_path, "write the results as JSON here");
  CLI11_PARSE(app, argc, argv);

  gphash::kv::KvConfig config;
  config.memory_bytes = uint64_t{1} << 30;
  KvStore store(config);
  const std::string value(value_size, 'v');
  // Keys of 16 bytes side by side (as the server's keys lie in its read buffers, not in one heap
  // allocation each).
  std::string key_bytes;
  for (uint64_t i = 0; i < keys; ++i) key_bytes += fmt::format("key:{:012d}", i);
  auto key_text = [&](uint64_t i) { return std::string_view(key_bytes).substr(16 * i, 16); };
  {
    std::vector<KvCommand> load;
    std::vector<KvCommand*> ptrs;
    for (uint64_t at = 0; at < keys; at += 4096) {
      load.assign(std::min<uint64_t>(4096, keys - at), KvCommand{});
      ptrs.clear();
      for (size_t j = 0; j < load.size(); ++j) {
        load[j].op = KvOp::kStore;
        load[j].key = key_text(at + j);
        load[j].value = value;
        ptrs.push_back(&load[j]);
      }
      store.execute(ptrs);
    }
  }

  std::mt19937_64 rng(1);
  nlohmann::json out = nlohmann::json::array();
  std::printf("%10s %14s %12s\n", "round", "commands/s", "ns/command");
  for (size_t size : round_sizes) {
    // Two rounds' commands alternate: a round's commands stay alive until the next round settles
    // them (its changes ride with the next round's searches, as in the server).
    std::vector<KvCommand> cmds[2] = {std::vector<KvCommand>(size), std::vector<KvCommand>(size)};
    std::vector<KvCommand*> ptrs(size);
    std::uniform_int_distribution<uint64_t> pick(0, keys - 1);
    std::bernoulli_distribution is_get(get_ratio);
    uint64_t rounds = 0, commands = 0;
    double elapsed = 0;
    const auto start = std::chrono::steady_clock::now();
    while (elapsed < seconds) {
      // 64 rounds between clock reads.
      for (int r = 0; r < 64; ++r, ++rounds) {
        std::vector<KvCommand>& round = cmds[rounds & 1];
        release(store, round);
        for (size_t j = 0; j < size; ++j) {
          KvCommand& c = round[j];
          c = KvCommand{};
          c.key = key_text(pick(rng));
          if (!is_get(rng)) {
            c.op = KvOp::kStore;
            c.value = value;
          }
          ptrs[j] = &c;
        }
        store.run(ptrs);
        commands += size;
      }
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    store.commit();
    release(store, cmds[0]);
    release(store, cmds[1]);
    for (auto& round : cmds) round.assign(size, KvCommand{});
    const double per_second = static_cast<double>(commands) / elapsed;
    std::printf("%10zu %14.0f %12.1f\n", size, per_second, 1e9 / per_second);
    out.push_back({{"round", size}, {"commands_per_second", per_second}, {"ns_per_command", 1e9 / per_second},
                   {"keys", keys}, {"value_size", value_size}, {"get_ratio", get_ratio}});
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}

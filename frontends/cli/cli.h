// The `gphash` command: its subcommands, their options and what each runs. Parsing is separate
// from running so the options can be tested on their own (tests/cli_options_test.cpp).
// Exit status: 0 success, 1 failure (an error, or `check` found a violation), 2 usage error.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <iostream>
#include <memory>
#include <vector>
#include <optional>
#include <string>

#include "gphash/config.h"
#include "options.h"

namespace gphash {
class Table;
}

namespace gphash::cli {

// Limits of the numeric options (the library's own limits where it has them).
inline constexpr uint64_t kMaxRecords = uint64_t{1} << 36;     // TableConfig::capacity's limit
inline constexpr uint64_t kMaxOperations = uint64_t{1} << 40;
inline constexpr uint64_t kMaxBatch = uint64_t{1} << 24;
inline constexpr uint64_t kMaxPoolBytes = uint64_t{1} << 44;   // 16 TiB
inline constexpr char kReserveHelp[] =
    "Allocate this much file space when the pool is created, for its growth (faster resizes; 0 = none)";

struct PoolConfigFlags {
  uint32_t key_width = 8;
  uint32_t value_width = 8;
  std::string shape = "2L-2H-8S";
  uint64_t capacity = uint64_t{1} << 20;
  std::optional<uint64_t> seed;
  bool value_checksums = false;
  std::string index = "gphash";
  uint32_t segment_bytes = 16384;  // HMEH only (the defaults of HmehConfig)
  uint32_t probe_buckets = 4;
  uint32_t stash_buckets = 4;
};

struct EngineFlags {
  std::string engine = "cpu";
  std::string placement = "mapped";
  int threads = 0;
  uint64_t max_pool_bytes = 0;
  uint64_t reserve_pool_bytes = 0;
  uint32_t mode = 0600;
  SnapshotOptions snapshots;
  uint32_t shards = 0;  // --shards N: N shards, every one on GPU 0 (GPU engine)
  std::string devices;  // --devices 0,1: one shard per entry, on that GPU
  // BktCache (GPU engine, mapped placement).
  std::string cache = "off";  // BktCache is off by default: it does not pay yet (config.h)
  double cache_fraction = 0.2;
  uint64_t cache_bytes = 0;
  uint64_t cache_reload = uint64_t{1} << 21;
  std::string cache_values = "on";
  std::string kernels = "warp";
  std::string tag_mirror = "on";  // CPU engine: OpenOptions::tag_mirror
  double max_load_factor = OpenOptions{}.max_load_factor;
};

// The shard list of --shards / --devices (OpenOptions::shards); throws CLI::ValidationError.
std::vector<int> shard_list(uint32_t shards, const std::string& devices);

struct WorkloadFlags {
  uint64_t records = 0;
  uint64_t operations = 0;
  std::string distribution;
  double theta = 0.99;
  uint64_t seed = 1;
  uint64_t batch = 1 << 16;
};

// Subcommands defined in a file of their own (data tools, snapshots): `add` declares them and
// their options through the registry; `run` runs the one that was parsed, if it is one of them.
class CommandGroup {
 public:
  virtual ~CommandGroup() = default;
  virtual void add(CLI::App& app, OptionRegistry& options) = 0;
  virtual std::optional<int> run() = 0;  // the exit status, or nullopt if none of ours was parsed
};
std::unique_ptr<CommandGroup> make_data_commands();
std::unique_ptr<CommandGroup> make_snapshot_commands();

// Snapshots around load, run and bench (snapshot_commands.cpp): the options, and the end of a
// command (a snapshot if --snapshot was given without an interval, then close, which takes the
// automatic snapshots' last one; then a summary).
void add_snapshot_options(CLI::App* app, OptionRegistry& options, SnapshotOptions& snapshots);
void finish_snapshots(Table& table, const SnapshotOptions& snapshots);
std::string describe_time(uint64_t unix_ns);  // "2026-11-23 10:00:00 UTC (12 s ago)", or "never"

class Cli {
 public:
  Cli();
  // Parses the arguments; returns 0 when a command is ready to run, else the exit status (help
  // and version: 0 with `done()` true; usage errors: 2, message printed to stderr).
  int parse(int argc, const char* const* argv, std::ostream& out = std::cout, std::ostream& err = std::cerr);
  bool done() const { return done_; }
  // Runs the parsed command; returns the exit status.
  int execute();

  const OptionRegistry& registry() const { return options_; }
  CLI::App& app() { return app_; }

 private:
  void add_pool_config(CLI::App* app);
  void add_engine(CLI::App* app);
  void add_workload(CLI::App* app, bool with_distribution);

  CLI::App app_;
  OptionRegistry options_;
  std::vector<std::unique_ptr<CommandGroup>> groups_;
  bool done_ = false;
  std::string key_width_text_ = "8";
  std::string pool_, json_path_, workloads_ = "load,a,b,c", which_, bench_pool_ = "gphash-bench";
  bool json_ = false, replace_ = false, no_progress_ = false;
  PoolConfigFlags cfg_;
  EngineFlags eng_;
  WorkloadFlags wl_;
  CLI::App *create_ = nullptr, *info_ = nullptr, *load_ = nullptr, *run_ = nullptr, *bench_ = nullptr,
           *check_ = nullptr, *repair_ = nullptr, *convert_ = nullptr;
};

}  // namespace gphash::cli

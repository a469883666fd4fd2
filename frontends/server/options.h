// Command-line options, named like memcached's where memcached has one.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "gphash/config.h"
#include "kv/kv_store.h"

namespace gphash::server {

enum class IoUring { kAuto, kOn, kOff };  // auto: on where the build and the kernel allow it

struct Options {
  uint16_t port = 11211;                // -p
  std::string listen = "127.0.0.1";     // -l: loopback unless asked
  uint64_t memory_mb = 64;              // -m
  uint32_t max_connections = 1024;      // -c
  int threads = 4;                      // -t: receiver/sender threads
  int partitions = 0;                   // --partitions: independent stores (index, items, rounds) by key hash; 0: auto (main.cpp)
  int verbose = 0;                      // -v, -vv
  uint32_t udp_port = 0;                // -U: must stay 0 (no UDP listener)
  uint32_t item_size_max = 1 << 20;     // -I
  std::string auth_file;                // -Y: memcached's ASCII authentication
  bool allow_public = false;            // --allow-public: bind a non-loopback address without -Y
  kv::Mode mode = kv::Mode::kCache;     // --mode
  std::string pool;                     // --pool (store mode)
  EngineKind engine = EngineKind::kCpu; // --engine
  int index_threads = 1;                // --index-threads
  std::vector<int> index_shards;        // --shards N / --devices 0,1: a sharded index, one shard per GPU
  size_t batch_size = 256;              // --batch-size: a round starts at this many commands...
  std::chrono::microseconds batch_period{0};   // --batch-period-us: ...or when the oldest waited this long
  bool pipeline = false;                // --pipeline: overlap a round's GPU batch with the round before (auto: GPU engine)
  int receiver_rounds = -1;             // --receiver-rounds: rounds a receiver runs after its own (-1: auto)
  IoUring io_uring = IoUring::kAuto;    // --io-uring: a loop pass's recvs, and its sends, one system call each
  size_t conn_buffer_limit = 4 << 20;   // --conn-buffer-limit: per connection, queued input and unsent output
  double growth_factor = 1.25;          // -f
  uint32_t hashpower = 0;               // -o hashpower=N: the index holds 2^N items before its first resize (0: main.cpp's default)
  bool force_flush = false;             // --force-flush
  SnapshotOptions snapshots;            // --snapshot FILE, --snapshot-every-seconds/-batches, --snapshot-mode
};

// Parses argv. Prints usage or an error naming the option and exits (0 for --help, 2 for a
// usage error) when it cannot return options.
Options parse_options(int argc, char** argv);

// Reads a -Y file: "user:password" per line. Throws std::runtime_error naming the file.
std::vector<std::pair<std::string, std::string>> read_auth_file(const std::string& path);

}  // namespace gphash::server

#include "options.h"

#include <arpa/inet.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <stdexcept>

namespace gphash::server {

namespace {

// memcached's size syntax for -I: a number with an optional k or m suffix.
uint64_t parse_size(const std::string& text) {
  size_t used = 0;
  const unsigned long long n = std::stoull(text, &used);
  uint64_t mult = 1;
  if (used < text.size()) {
    const char s = static_cast<char>(std::tolower(text[used]));
    if (used + 1 != text.size() || (s != 'k' && s != 'm')) throw std::invalid_argument("bad size");
    mult = s == 'k' ? 1024 : 1024 * 1024;
  }
  return n * mult;
}

bool is_loopback(const std::string& address) {
  in_addr a{};
  if (inet_pton(AF_INET, address.c_str(), &a) == 1) return (ntohl(a.s_addr) >> 24) == 127;
  return address == "localhost";
}

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "gphash-server: " << message << "\nRun with --help for the options.\n";
  std::exit(2);
}

}  // namespace

Options parse_options(int argc, char** argv) {
  Options o;
  CLI::App app{"gphash-server: a memcached-compatible key-value server on a gphash signature index"};
  app.set_version_flag("-V,--version", "gphash-server 0.1.0 (memcached protocol 1.6)");
  std::string item_size = "1m", mode = "cache", engine = "cpu", io_uring = "auto";
  int64_t period_us = o.batch_period.count();
  app.add_option("-p,--port", o.port, "TCP port (default 11211; 0 picks a free one and prints it)")->check(CLI::Range(0, 65535));
  app.add_option("-l,--listen", o.listen, "address to listen on (default 127.0.0.1)");
  app.add_option("-m,--memory-limit", o.memory_mb, "item memory in megabytes (default 64)")->check(CLI::Range(1, 1 << 20));
  app.add_option("-c,--conn-limit", o.max_connections, "most simultaneous connections (default 1024)")->check(CLI::Range(1, 1 << 20));
  app.add_option("-t,--threads", o.threads, "receiver/sender threads (default 4)")->check(CLI::Range(1, 256));
  app.add_option("--partitions", o.partitions,
                 "split the keys by hash over N independent stores, each with its own index, items, -m/N of the "
                 "memory and its own round pipeline, so N rounds run at once (default: a cache -t, at most 4 with --engine "
                 "gpu, while each partition holds two of the largest items; a store the number its pool was written "
                 "with, else 1)")
      ->check(CLI::Range(1, 64));
  app.add_flag("-v,--verbose", o.verbose, "log connections (-vv: and every request)");
  app.add_option("-U,--udp-port", o.udp_port, "UDP port: only 0 (off) is supported")->check(CLI::Range(0, 65535));
  app.add_option("-I,--max-item-size", item_size, "largest item, e.g. 1m (default), 512k; 1k to 1024m");
  app.add_option("-Y,--auth-file", o.auth_file, "memcached ASCII authentication: file of user:password lines")->check(CLI::ExistingFile);
  app.add_flag("--allow-public", o.allow_public, "allow a non-loopback -l without -Y (prints a warning)");
  app.add_option("--mode", mode, "cache (memcached: evicts, volatile) or store (persistent, never evicts)")->check(CLI::IsMember({"cache", "store"}));
  app.add_option("--pool", o.pool, "store mode: pool NAME (/dev/shm/NAME.index, items included) or a path prefix");
  app.add_option("--engine", engine, "index engine: cpu (default) or gpu")->check(CLI::IsMember({"cpu", "gpu"}));
  app.add_option("--index-threads", o.index_threads, "CPU engine threads for index batches (default 1)")->check(CLI::Range(1, 256));
  uint32_t shards = 0;
  std::string devices;
  app.add_option("--shards", shards, "shard the index over N pools, each run by its own thread (GPU engine: all on GPU 0)")->check(CLI::Range(1, 1024));
  app.add_option("--devices", devices, "shard the index over these GPUs, one shard per entry: 0,1 (every GPU given); 0,0 = two shards on GPU 0");
  app.add_option("--batch-size", o.batch_size, "start a round at this many pending commands (default 256)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--batch-period-us", period_us, "... or when the oldest has waited this long (default 0: at once, batching what arrives during a round)")->check(CLI::Range(0, 1000000));
  std::string pipeline = "auto";
  app.add_option("--pipeline", pipeline,
                 "overlap each round's index batch with resolving the round before: auto (default: with --engine gpu in "
                 "cache mode), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--receiver-rounds", o.receiver_rounds,
                 "rounds a receiver runs after its own before it goes back to its connections (default: 4, 0 when "
                 "pipelined)")
      ->check(CLI::Range(0, 64));
  app.add_option("--io-uring", io_uring,
                 "auto (default), on or off: each worker loop pass's recvs, and its sends, go to the kernel in one "
                 "io_uring system call instead of one per connection (epoll still says which sockets are ready); auto "
                 "uses it where the build has liburing and the kernel allows it")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--conn-buffer-limit", o.conn_buffer_limit, "per-connection bytes of queued requests and of unsent replies before reading pauses (default 4 MiB)")->check(CLI::Range(4096, 1 << 30));
  app.add_option("-f,--slab-growth-factor", o.growth_factor, "chunk size growth factor (default 1.25)")->check(CLI::Range(1.01, 4.0));
  std::vector<std::string> extended;
  app.add_option("-o,--extended", extended, "memcached's extended options, comma separated; supported: hashpower=N (the index "
                                            "holds 2^N items before it first grows; default: the items -m holds at 256 bytes)")
      ->delimiter(',');
  app.add_flag("--force-flush", o.force_flush, "persist with cache-line flushes (persistent memory)");
  std::string snapshot_mode = "600";
  app.add_option("--snapshot", o.snapshots.path,
                 "store mode: snapshot FILE on a real file system (survives a reboot); a missing pool is restored from it, "
                 "and a clean stop takes a last snapshot");
  app.add_option("--snapshot-every-seconds", o.snapshots.every_seconds,
                 "take a snapshot this often (default 60 when neither this nor --snapshot-every-batches is given)")
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--snapshot-every-batches", o.snapshots.every_batches, "... or after this many writing index batches (0: off)");
  app.add_option("--snapshot-mode", snapshot_mode, "permissions of a new snapshot file, octal (default 600)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    usage_error(e.what());
  }
  o.batch_period = std::chrono::microseconds(period_us);
  for (const std::string& option : extended) {
    const size_t eq = option.find('=');
    const std::string key = option.substr(0, eq), value = eq == std::string::npos ? "" : option.substr(eq + 1);
    if (key != "hashpower") usage_error("-o: '" + option + "' is not supported (supported: hashpower=N)");
    char* end = nullptr;
    const unsigned long power = std::strtoul(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || power < 12 || power > 32) usage_error("-o hashpower: a number from 12 to 32");
    o.hashpower = static_cast<uint32_t>(power);
  }
  o.mode = mode == "store" ? kv::Mode::kStore : kv::Mode::kCache;
  o.engine = engine == "gpu" ? EngineKind::kGpu : EngineKind::kCpu;
  o.io_uring = io_uring == "on" ? IoUring::kOn : io_uring == "off" ? IoUring::kOff : IoUring::kAuto;
  // The CPU engine runs a batch before submit returns: nothing would overlap, and writes would
  // wait a round longer. Store mode (its index host-mapped) measured 4-15% slower pipelined on
  // the H200 (bench/results/2026-11-28-server-store-pipeline): on by default in cache mode only.
  o.pipeline = pipeline == "on" || (pipeline == "auto" && o.engine == EngineKind::kGpu && o.mode == kv::Mode::kCache);
  if (!devices.empty()) {
    for (size_t pos = 0; pos <= devices.size();) {
      size_t comma = devices.find(',', pos);
      if (comma == std::string::npos) comma = devices.size();
      const std::string gpu = devices.substr(pos, comma - pos);
      if (gpu.empty() || gpu.size() > 4 || gpu.find_first_not_of("0123456789") != std::string::npos)
        usage_error("--devices: '" + devices + "' is not a list of GPU numbers such as 0,1");
      o.index_shards.push_back(std::stoi(gpu));
      pos = comma + 1;
    }
    if (o.index_shards.size() > 1024) usage_error("--devices: at most 1024 shards");
    if (shards && shards != o.index_shards.size()) usage_error("--shards: differs from the number of GPUs --devices lists; give one of them");
  } else {
    o.index_shards.assign(shards, 0);
  }
  uint64_t item = 0;
  try {
    item = parse_size(item_size);
  } catch (const std::exception&) {
    usage_error("-I,--max-item-size: '" + item_size + "' is not a size (a number with an optional k or m)");
  }
  if (item < 1024 || item > (uint64_t{1} << 30)) usage_error("-I,--max-item-size: must be between 1k and 1024m");
  if (item > o.memory_mb * (1 << 20) / 2) usage_error("-I,--max-item-size: cannot be larger than half of -m (" + std::to_string(o.memory_mb) + " MB)");
  o.item_size_max = static_cast<uint32_t>(item);
  if (o.partitions > 0 && o.memory_mb < static_cast<uint64_t>(o.partitions) * 2)
    usage_error("--partitions: each partition needs at least 2 MB of -m (" + std::to_string(o.memory_mb) + " MB for " +
                std::to_string(o.partitions) + ")");
  if (o.partitions > 0 && item > o.memory_mb * (1 << 20) / o.partitions / 2)
    usage_error("-I,--max-item-size: cannot be larger than half of a partition's memory (-m / --partitions)");
  if (o.udp_port != 0) usage_error("-U,--udp-port: UDP is not supported (it invites amplification attacks); use -U 0 or leave it out");
  if (o.mode == kv::Mode::kStore && o.pool.empty()) usage_error("--pool: store mode needs a pool name");
  if (o.mode == kv::Mode::kCache && !o.pool.empty()) usage_error("--pool: only store mode keeps a pool (add --mode store)");
  if (o.mode == kv::Mode::kCache && !o.snapshots.path.empty()) usage_error("--snapshot: only store mode keeps data (add --mode store)");
  if ((o.snapshots.every_seconds > 0 || o.snapshots.every_batches > 0) && o.snapshots.path.empty())
    usage_error("--snapshot-every-seconds/--snapshot-every-batches: name the file with --snapshot FILE");
  // A snapshot file with no schedule would never be written (the last snapshot at a clean stop
  // comes with automatic ones): once a minute unless told otherwise.
  if (!o.snapshots.path.empty() && o.snapshots.every_seconds == 0 && o.snapshots.every_batches == 0) o.snapshots.every_seconds = 60;
  char* end = nullptr;
  const unsigned long file_mode = std::strtoul(snapshot_mode.c_str(), &end, 8);
  if (snapshot_mode.empty() || *end != '\0' || file_mode > 0777) usage_error("--snapshot-mode: an octal mode such as 600");
  o.snapshots.file_mode = static_cast<uint32_t>(file_mode);
  if (!is_loopback(o.listen) && o.auth_file.empty()) {
    if (!o.allow_public)
      usage_error("-l,--listen: " + o.listen + " is not a loopback address; anyone who reaches it could read and change every item. "
                  "Use -Y with an auth file, or --allow-public to accept that");
    std::cerr << "gphash-server: WARNING: listening on " << o.listen << " without authentication (-Y): anyone who reaches it can read and change every item\n";
  }
  return o;
}

std::vector<std::pair<std::string, std::string>> read_auth_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read the auth file " + path);
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos || colon == 0) throw std::runtime_error("auth file " + path + ": expected user:password lines");
    out.emplace_back(line.substr(0, colon), line.substr(colon + 1));
  }
  if (out.empty()) throw std::runtime_error("auth file " + path + " has no user:password line");
  return out;
}

}  // namespace gphash::server

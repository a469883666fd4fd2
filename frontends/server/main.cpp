// gphash-server: memcached's protocol on a gphash signature index (issue 14, Mega-KV's design).
//   gphash-server -p 11211 -t 4 -m 64                       # a cache, like memcached
//   gphash-server --mode store --pool kv -m 1024             # persistent items in /dev/shm
// docs/PROTOCOL.md says what is supported and what differs from memcached.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "gphash/error.h"
#include "kv/kv_error.h"
#include "kv/kv_store.h"
#include "server.h"

using namespace gphash;
using namespace gphash::server;

namespace {

int listen_on(const std::string& address, uint16_t& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int err = getaddrinfo(address.c_str(), service.c_str(), &hints, &res); err != 0)
    throw std::runtime_error("-l " + address + ": " + gai_strerror(err));
  int fd = -1;
  std::string why;
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 1024) == 0) break;
    why = std::strerror(errno);
    ::close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) throw std::runtime_error("cannot listen on " + address + ":" + service + ": " + why);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  port = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                       : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return fd;
}

// The stores' configurations, one per partition. Partition k of N keeps its pool at
// NAME.part<k>of<N> (and its snapshot at FILE.part<k>of<N>): the files say how many partitions
// wrote the store, so a restart without --partitions uses that number and one with another number
// is refused (keys would be looked for in partitions that never held them), as is a store with a
// partition missing (its keys with it). Otherwise the default is, for a cache, one partition per
// receiver (-t) while each partition's memory holds at least two of the largest items
// (bench/results/2026-11-29-server-partitions); for a new store one: its memory is split among
// the partitions, so a full partition refuses writes while another has room, which only a user
// who asked for partitions should meet. With the GPU index at most 4, the number measured (N
// partitions cut every GPU batch N ways).
std::vector<kv::KvConfig> partition_configs(const Options& o) {
  constexpr int kMaxPartitions = 64;  // --partitions' range
  kv::KvConfig config;
  config.mode = o.mode;
  config.pool = o.pool;
  config.item_size_max = o.item_size_max;
  config.growth_factor = o.growth_factor;
  config.engine = o.engine;
  config.index_threads = o.index_threads;
  config.index_shards = o.index_shards;
  config.force_flush = o.force_flush;
  config.pipeline = o.pipeline;
  config.snapshots = o.snapshots;
  auto part = [&](int k, int n) {
    kv::KvConfig c = config;
    if (n == 1) return c;  // memcached's CAS sequence, the pool's plain name
    c.cas_first = static_cast<uint64_t>(k) + 1;
    c.cas_stride = static_cast<uint32_t>(n);
    if (c.mode == kv::Mode::kCache) return c;  // nothing on disk
    const std::string suffix = ".part" + std::to_string(k) + "of" + std::to_string(n);
    c.pool += suffix;
    if (!c.snapshots.path.empty()) c.snapshots.path += suffix;
    return c;
  };
  int n = o.partitions;
  if (n == 0 && o.mode == kv::Mode::kStore) n = 1;  // the store's files may say otherwise, below
  if (n == 0) {
    const uint64_t memory = o.memory_mb << 20;
    const uint64_t fit = std::min<uint64_t>(memory / (2 * uint64_t{o.item_size_max}), memory / (2 << 20));
    const uint64_t wanted = o.engine == EngineKind::kGpu ? std::min(o.threads, 4) : o.threads;
    n = static_cast<int>(std::clamp<uint64_t>(std::min(fit, wanted), 1, kMaxPartitions));
  }
  if (o.mode == kv::Mode::kStore) {
    const std::string name = "pool " + o.pool;
    std::vector<int> layouts;  // partition counts some file of this store was written with
    if (kv::KvStore::store_exists(config)) layouts.push_back(1);
    for (int m = 2; m <= kMaxPartitions; ++m)
      for (int k = 0; k < m; ++k)
        if (kv::KvStore::store_exists(part(k, m))) {
          layouts.push_back(m);
          break;
        }
    if (layouts.size() > 1)
      throw kv::KvError(kv::KvErrorCode::kCorrupt, name + " has files of " + std::to_string(layouts.size()) +
                                                       " partition layouts (1 = NAME, N = NAME.part<k>of<N>): remove the ones not in use");
    if (!layouts.empty()) {
      const int existing = layouts.front();
      for (int k = 0; k < existing; ++k)
        if (!kv::KvStore::store_exists(part(k, existing)))
          throw kv::KvError(kv::KvErrorCode::kCorrupt, name + ": partition " + std::to_string(k) + " of " + std::to_string(existing) +
                                                           " is missing, and its keys with it");
      if (o.partitions == 0) n = existing;
      if (n != existing)
        throw kv::KvError(kv::KvErrorCode::kInvalidArgument, name + " was written by " + std::to_string(existing) +
                                                                 (existing == 1 ? " partition" : " partitions") + ": start with --partitions " +
                                                                 std::to_string(existing) + " or without --partitions");
    }
  }
  config.memory_bytes = (o.memory_mb << 20) / static_cast<uint64_t>(n);
  // The index starts with room for every item -m holds at 256 bytes, and grows past that;
  // -o hashpower sets another start, as memcached's. Started at 2^16 items (memcached's default),
  // the CPU index cost 7-10% of the server's CPU a request less on the 2-core VM but served 8% fewer
  // 32-byte gets on the H200 machine's 16 cores (in all five runs) and 4% fewer 512-byte ones
  // (bench/results/2026-12-01-gpu-trap-server-index); the GPU index measured alike either way.
  const uint64_t start = o.hashpower ? uint64_t{1} << o.hashpower : (o.memory_mb << 20) / 256;
  config.index_capacity = std::max<uint64_t>(start / static_cast<uint64_t>(n), 4096);
  if (config.memory_bytes < (uint64_t{2} << 20) || config.memory_bytes < 2 * uint64_t{o.item_size_max})
    throw kv::KvError(kv::KvErrorCode::kInvalidArgument,
                      "-m " + std::to_string(o.memory_mb) + " over " + std::to_string(n) +
                          " partitions: each needs at least 2 MB and room for two of the largest items (-I)");
  std::vector<kv::KvConfig> configs;
  for (int k = 0; k < n; ++k) configs.push_back(part(k, n));
  return configs;
}

}  // namespace

int main(int argc, char** argv) {
  ServerContext ctx;
  ctx.options = parse_options(argc, argv);
  const Options& o = ctx.options;
  ctx.verbosity = o.verbose;

  // Signals go to the main thread only (sigwait below); the others never see them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::vector<std::unique_ptr<kv::KvStore>> stores;
  try {
    if (!o.auth_file.empty()) ctx.auth = read_auth_file(o.auth_file);
    // Measured on 16 cores against plain recv and send calls: 32-byte gets at one request in
    // flight +7%, at four +40% (bench/results/2026-11-30-server-io-uring), hence on where it can be.
    if (o.io_uring != IoUring::kOff) {
      try {
        IoBatch probe(8);
        ctx.io_uring = true;
      } catch (const std::exception& e) {
        if (o.io_uring == IoUring::kOn) throw;
        if (o.verbose > 0) std::fprintf(stderr, "gphash-server: %s; plain recv and send calls instead\n", e.what());
      }
    }
    for (const kv::KvConfig& config : partition_configs(o)) stores.push_back(std::make_unique<kv::KvStore>(config));
    ctx.options.partitions = static_cast<int>(stores.size());
    uint16_t port = o.port;
    ctx.listen_fd = listen_on(o.listen, port);
    ctx.options.port = port;
  } catch (const gphash::Error& e) {
    std::fprintf(stderr, "gphash-server: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gphash-server: %s\n", e.what());
    return 1;
  }
  for (size_t p = 0; p < stores.size(); ++p) {
    const auto& rec = stores[p]->recovery();
    if (rec.recovered)
      std::fprintf(stderr, "gphash-server: opened pool %s: %llu items (%llu unreachable chunks freed) in %.3f s\n",
                   stores[p]->config().pool.c_str(), static_cast<unsigned long long>(rec.live),
                   static_cast<unsigned long long>(rec.freed), rec.seconds);
  }

  std::vector<std::unique_ptr<Scheduler>> schedulers;
  for (size_t p = 0; p < stores.size(); ++p) {
    schedulers.push_back(std::make_unique<Scheduler>(*stores[p], o, static_cast<uint16_t>(p)));
    ctx.stores.push_back(stores[p].get());
    ctx.schedulers.push_back(schedulers.back().get());
  }
  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < o.threads; ++i) workers.push_back(std::make_unique<Worker>(ctx, i));
  for (auto& w : workers) ctx.workers.push_back(w.get());
  // Read before the workers start: it asks the table for its info, which rounds change.
  const std::string index_engine = stores.front()->index_engine();
  for (auto& w : workers) w->start();
  // Tests and scripts read this line to learn the port (-p 0 picks a free one).
  std::printf("gphash-server: listening on %s:%u (%s mode, %s index, %d threads, %d partitions)\n", o.listen.c_str(),
              ctx.options.port, o.mode == kv::Mode::kStore ? "store" : "cache", index_engine.c_str(), o.threads,
              o.partitions);
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  // Drain: the workers stop reading, answer what they read, close; then the scheduler ends and
  // the store closes its index cleanly.
  ctx.stopping = true;
  for (auto& w : workers) w->wake();
  for (auto& w : workers) w->join();
  for (auto& scheduler : schedulers) scheduler->stop();
  workers.clear();
  ::close(ctx.listen_fd);
  schedulers.clear();
  stores.clear();
  std::fprintf(stderr, "gphash-server: stopped (signal %d), pool closed cleanly\n", sig);
  return 0;
}

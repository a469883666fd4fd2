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

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "gphash/error.h"
#include "kv/kv_error.h"
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

  std::unique_ptr<kv::KvStore> store;
  try {
    if (!o.auth_file.empty()) ctx.auth = read_auth_file(o.auth_file);
    kv::KvConfig config;
    config.mode = o.mode;
    config.pool = o.pool;
    config.memory_bytes = o.memory_mb << 20;
    config.item_size_max = o.item_size_max;
    config.growth_factor = o.growth_factor;
    config.engine = o.engine;
    config.index_threads = o.index_threads;
    config.index_shards = o.index_shards;
    config.force_flush = o.force_flush;
    config.pipeline = o.pipeline;
    config.snapshots = o.snapshots;
    store = std::make_unique<kv::KvStore>(config);
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
  ctx.store = store.get();
  const auto& rec = store->recovery();
  if (rec.recovered)
    std::fprintf(stderr, "gphash-server: opened pool %s: %llu items (%llu unreachable chunks freed) in %.3f s\n", o.pool.c_str(),
                 static_cast<unsigned long long>(rec.live), static_cast<unsigned long long>(rec.freed), rec.seconds);

  Scheduler scheduler(*store, o);
  ctx.scheduler = &scheduler;
  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < o.threads; ++i) workers.push_back(std::make_unique<Worker>(ctx, i));
  for (auto& w : workers) ctx.workers.push_back(w.get());
  for (auto& w : workers) w->start();
  // Tests and scripts read this line to learn the port (-p 0 picks a free one).
  std::printf("gphash-server: listening on %s:%u (%s mode, %s index, %d threads)\n", o.listen.c_str(), ctx.options.port,
              o.mode == kv::Mode::kStore ? "store" : "cache", store->index_engine().c_str(), o.threads);
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  // Drain: the workers stop reading, answer what they read, close; then the scheduler ends and
  // the store closes its index cleanly.
  ctx.stopping = true;
  for (auto& w : workers) w->wake();
  for (auto& w : workers) w->join();
  scheduler.stop();
  workers.clear();
  ::close(ctx.listen_fd);
  store.reset();
  std::fprintf(stderr, "gphash-server: stopped (signal %d), pool closed cleanly\n", sig);
  return 0;
}

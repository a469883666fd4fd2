// gphash-server-loadgen: a memcached text-protocol load generator, the same for gphash-server
// and memcached (scripts/server_bench.sh drives both with it).
//
// Closed loop: every connection keeps --depth requests in flight; each reply's latency (send to
// last byte) is recorded. Keys are --key-size bytes, values --value-size; --get-ratio of the
// requests are gets of --multiget keys, the rest sets; keys are chosen uniformly or by Zipf
// (theta --zipf, hot keys scattered over the key space). It preloads every key first (so gets
// hit), then runs for --seconds and prints one JSON object.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <dlfcn.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "workload/random.h"
#include "workload/zipf.h"

namespace {

using Clock = std::chrono::steady_clock;
using gphash::workload::Rng;

struct Config {
  std::string host = "127.0.0.1";
  int port = 11211;
  int threads = 2;
  int connections = 16;
  int depth = 1;
  double seconds = 5;
  uint64_t keys = 100000;
  int key_size = 16;
  int value_size = 32;
  double get_ratio = 0.95;
  int multiget = 1;
  std::string distribution = "uniform";
  double zipf = 0.99;
  bool preload = true;
  uint64_t seed = 1;
};

std::string make_key(uint64_t i, int size) {
  std::string k = "k" + std::to_string(i);
  if (static_cast<int>(k.size()) < size) k.insert(1, static_cast<size_t>(size) - k.size(), '0');
  return k;
}

int connect_to(const Config& c) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(c.port));
  inet_pton(AF_INET, c.host.c_str(), &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    std::perror("connect");
    std::exit(1);
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// Reads one reply off the front of `in`: returns bytes used (0 if incomplete); counts hits.
size_t parse_reply(std::string_view in, bool is_get, uint64_t& hits, uint64_t& errors) {
  if (!is_get) {
    const size_t nl = in.find("\r\n");
    if (nl == std::string_view::npos) return 0;
    if (in.substr(0, nl) != "STORED") ++errors;
    return nl + 2;
  }
  size_t at = 0;
  for (;;) {
    const size_t nl = in.find("\r\n", at);
    if (nl == std::string_view::npos) return 0;
    const std::string_view line = in.substr(at, nl - at);
    if (line == "END") return nl + 2;
    if (!line.starts_with("VALUE ")) {
      ++errors;
      return nl + 2;
    }
    const size_t last = line.rfind(' ');
    const size_t bytes = std::stoul(std::string(line.substr(last + 1)));
    if (in.size() < nl + 2 + bytes + 2) return 0;
    at = nl + 2 + bytes + 2;
    ++hits;
  }
}

// GPU power from NVML, loaded at run time (no link-time dependency): Mega-KV reports operations
// per watt. Samples every 50 ms while the load runs; absent library or GPU: no figure.
class PowerSampler {
 public:
  bool start() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib_) return false;
    using Init = int (*)();
    using Handle = int (*)(unsigned, void**);
    auto init = reinterpret_cast<Init>(dlsym(lib_, "nvmlInit_v2"));
    auto handle = reinterpret_cast<Handle>(dlsym(lib_, "nvmlDeviceGetHandleByIndex_v2"));
    power_ = reinterpret_cast<Power>(dlsym(lib_, "nvmlDeviceGetPowerUsage"));
    shutdown_ = reinterpret_cast<Init>(dlsym(lib_, "nvmlShutdown"));
    if (!init || !handle || !power_ || init() != 0 || handle(0, &device_) != 0) return false;
    thread_ = std::thread([this] {
      while (!stop_) {
        unsigned mw = 0;
        if (power_(device_, &mw) == 0) {
          sum_mw_ += mw;
          ++samples_;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    return true;
  }
  double stop() {  // mean watts, 0 without samples
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (shutdown_) shutdown_();
    return samples_ ? static_cast<double>(sum_mw_) / static_cast<double>(samples_) / 1000.0 : 0.0;
  }

 private:
  using Power = int (*)(void*, unsigned*);
  void* lib_ = nullptr;
  void* device_ = nullptr;
  Power power_ = nullptr;
  int (*shutdown_)() = nullptr;
  std::atomic<bool> stop_{false};
  uint64_t sum_mw_ = 0, samples_ = 0;
  std::thread thread_;
};

struct ThreadResult {
  std::vector<uint32_t> latency_ns;
  uint64_t requests = 0, ops = 0, gets = 0, hits = 0, errors = 0;
};

void preload(const Config& c, int part, int parts) {
  const int fd = connect_to(c);
  const std::string value(static_cast<size_t>(c.value_size), 'v');
  std::string batch, in;
  char buf[65536];
  for (uint64_t i = static_cast<uint64_t>(part); i < c.keys;) {
    batch.clear();
    int n = 0;
    for (; n < 200 && i < c.keys; ++n, i += static_cast<uint64_t>(parts))
      batch += "set " + make_key(i, c.key_size) + " 0 0 " + std::to_string(c.value_size) + "\r\n" + value + "\r\n";
    send(fd, batch.data(), batch.size(), MSG_NOSIGNAL);
    int replies = 0;
    while (replies < n) {
      const ssize_t r = recv(fd, buf, sizeof buf, 0);
      if (r <= 0) std::exit(1);
      in.append(buf, static_cast<size_t>(r));
      size_t pos;
      while ((pos = in.find("\r\n")) != std::string::npos) {
        in.erase(0, pos + 2);
        ++replies;
      }
    }
  }
  close(fd);
}

void run_thread(const Config& c, int id, int conns, Clock::time_point start, Clock::time_point end, ThreadResult& res) {
  Rng rng(c.seed * 1000 + static_cast<uint64_t>(id));
  gphash::workload::UniformChooser uniform(c.keys);
  std::unique_ptr<gphash::workload::ZipfExact> zipf;
  if (c.distribution == "zipf") zipf = std::make_unique<gphash::workload::ZipfExact>(c.keys, c.zipf, true, c.seed);
  auto pick = [&] { return zipf ? zipf->next(rng) : uniform.next(rng); };
  const std::string value(static_cast<size_t>(c.value_size), 'w');
  struct Conn {
    int fd;
    std::string in, out;
    std::deque<std::pair<Clock::time_point, bool>> sent;  // (time, is_get)
  };
  std::vector<Conn> cs(static_cast<size_t>(conns));
  const int ep = epoll_create1(0);
  for (size_t i = 0; i < cs.size(); ++i) {
    cs[i].fd = connect_to(c);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev);
  }
  while (Clock::now() < start) std::this_thread::sleep_for(std::chrono::microseconds(100));
  res.latency_ns.reserve(1 << 20);
  auto issue = [&](Conn& k) {
    while (static_cast<int>(k.sent.size()) < c.depth) {
      const bool get = rng.next_double() < c.get_ratio;
      if (get) {
        k.out += "get";
        for (int j = 0; j < c.multiget; ++j) k.out += " " + make_key(pick(), c.key_size);
        k.out += "\r\n";
      } else {
        k.out += "set " + make_key(pick(), c.key_size) + " 0 0 " + std::to_string(c.value_size) + "\r\n" + value + "\r\n";
      }
      k.sent.emplace_back(Clock::now(), get);
    }
    while (!k.out.empty()) {
      const ssize_t n = send(k.fd, k.out.data(), k.out.size(), MSG_NOSIGNAL);
      if (n <= 0) break;
      k.out.erase(0, static_cast<size_t>(n));
    }
  };
  for (auto& k : cs) issue(k);
  epoll_event evs[256];
  char buf[1 << 16];
  bool running = true;
  while (running) {
    const int n = epoll_wait(ep, evs, 256, 100);
    const auto now = Clock::now();
    if (now >= end) running = false;
    for (int i = 0; i < n; ++i) {
      Conn& k = cs[evs[i].data.u64];
      const ssize_t r = recv(k.fd, buf, sizeof buf, 0);
      if (r <= 0) {
        std::cerr << "loadgen: the server closed a connection\n";
        std::exit(1);
      }
      k.in.append(buf, static_cast<size_t>(r));
      size_t used;
      const auto t = Clock::now();
      while (!k.sent.empty() && (used = parse_reply(k.in, k.sent.front().second, res.hits, res.errors)) > 0) {
        k.in.erase(0, used);
        const auto [sent_at, get] = k.sent.front();
        k.sent.pop_front();
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t - sent_at).count();
        res.latency_ns.push_back(static_cast<uint32_t>(std::min<int64_t>(ns, UINT32_MAX)));
        ++res.requests;
        res.ops += get ? static_cast<uint64_t>(c.multiget) : 1;
        res.gets += get ? static_cast<uint64_t>(c.multiget) : 0;
      }
      if (running) issue(k);
    }
  }
  for (auto& k : cs) close(k.fd);
  close(ep);
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"gphash-server-loadgen: closed-loop memcached text-protocol load"};
  app.add_option("--host", c.host);
  app.add_option("-p,--port", c.port)->required()->check(CLI::Range(1, 65535));
  app.add_option("--threads", c.threads)->check(CLI::Range(1, 256));
  app.add_option("--connections", c.connections)->check(CLI::Range(1, 100000));
  app.add_option("--depth", c.depth, "requests in flight per connection")->check(CLI::Range(1, 1024));
  app.add_option("--seconds", c.seconds)->check(CLI::Range(0.1, 3600.0));
  app.add_option("--keys", c.keys)->check(CLI::Range(uint64_t{1}, uint64_t{1} << 32));
  app.add_option("--key-size", c.key_size)->check(CLI::Range(4, 250));
  app.add_option("--value-size", c.value_size)->check(CLI::Range(1, 1 << 20));
  app.add_option("--get-ratio", c.get_ratio)->check(CLI::Range(0.0, 1.0));
  app.add_option("--multiget", c.multiget)->check(CLI::Range(1, 1000));
  app.add_option("--distribution", c.distribution)->check(CLI::IsMember({"uniform", "zipf"}));
  app.add_option("--zipf", c.zipf)->check(CLI::Range(0.01, 5.0));
  app.add_option("--seed", c.seed);
  app.add_flag("!--no-preload", c.preload);
  bool nvml_wanted = false;
  app.add_flag("--nvml", nvml_wanted, "sample GPU 0's power through NVML and report operations per watt");
  CLI11_PARSE(app, argc, argv);
  if (c.connections < c.threads) c.threads = c.connections;

  if (c.preload) {
    std::vector<std::thread> ts;
    for (int i = 0; i < c.threads; ++i) ts.emplace_back(preload, std::cref(c), i, c.threads);
    for (auto& t : ts) t.join();
  }
  std::vector<ThreadResult> results(static_cast<size_t>(c.threads));
  const auto start = Clock::now() + std::chrono::milliseconds(200);
  const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(c.seconds));
  PowerSampler power;
  const bool nvml = nvml_wanted && power.start();
  std::vector<std::thread> ts;
  for (int i = 0; i < c.threads; ++i) {
    const int conns = c.connections / c.threads + (i < c.connections % c.threads ? 1 : 0);
    ts.emplace_back(run_thread, std::cref(c), i, conns, start, end, std::ref(results[static_cast<size_t>(i)]));
  }
  for (auto& t : ts) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  const double watts = nvml ? power.stop() : 0.0;
  ThreadResult all;
  for (auto& r : results) {
    all.requests += r.requests;
    all.ops += r.ops;
    all.gets += r.gets;
    all.hits += r.hits;
    all.errors += r.errors;
    all.latency_ns.insert(all.latency_ns.end(), r.latency_ns.begin(), r.latency_ns.end());
  }
  std::sort(all.latency_ns.begin(), all.latency_ns.end());
  auto pct = [&](double p) {
    if (all.latency_ns.empty()) return 0.0;
    return all.latency_ns[std::min(all.latency_ns.size() - 1, static_cast<size_t>(p * static_cast<double>(all.latency_ns.size())))] / 1000.0;
  };
  nlohmann::json j = {{"requests", all.requests}, {"ops", all.ops}, {"seconds", secs},
                      {"requests_per_s", static_cast<double>(all.requests) / secs}, {"ops_per_s", static_cast<double>(all.ops) / secs},
                      {"p50_us", pct(0.50)}, {"p99_us", pct(0.99)}, {"p999_us", pct(0.999)},
                      {"get_hit_ratio", all.gets ? static_cast<double>(all.hits) / static_cast<double>(all.gets) : 0.0},
                      {"errors", all.errors}, {"connections", c.connections}, {"depth", c.depth}, {"threads", c.threads},
                      {"keys", c.keys}, {"key_size", c.key_size}, {"value_size", c.value_size}, {"get_ratio", c.get_ratio},
                      {"multiget", c.multiget}, {"distribution", c.distribution}};
  if (watts > 0) {
    j["gpu_watts"] = watts;
    j["ops_per_gpu_watt"] = static_cast<double>(all.ops) / secs / watts;
  }
  std::cout << j.dump() << std::endl;
  return all.errors ? 1 : 0;
}

// The crash tests' child: opens (or creates) a pool and runs seeded batches on it until it is
// killed, reporting each batch before it starts (BEGIN) and after it was acknowledged (ACK) on
// the report fd (report_stream.h). The parent kills it at a moment of its choosing, or a named
// crash point does (GPHASH_CRASH_AT, crash_point.h), and then checks the pool against what was
// acknowledged. With --max-batches it stops by itself, closes the pool and says DONE. In
// crash-point builds GPHASH_CRASH_DELAY=point:us makes worker thread 0 sleep at every hit of a
// point, which widens a race window between the engine's threads at that step.
//
// Usage: crash_child --pool PATH --report-fd FD [--create --key-width K --value-width V
//        --index gphash|hmeh --shape 2L-2H-8S --segment-bytes B --capacity C] [--engine cpu|gpu]
//        [--threads T] --seed S --first-batch B [--max-batches N] [workload options, see WorkloadParams]
#include <omp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "crash_workload.h"
#include "engines/common/crash_point.h"
#include "gphash/table.h"
#include "report_stream.h"

namespace {

using namespace gphash;
using namespace gphash::crashtest;

#if GPHASH_CRASH_POINTS
// GPHASH_CRASH_DELAY=point:microseconds: worker thread 0 sleeps at every hit of that point while
// the other threads run on, so a race window at that step becomes wide.
int g_delay_point = -1;
int64_t g_delay_us = 0;
void delay_at_point(int index) {
  if (index == g_delay_point && omp_get_thread_num() == 0) usleep(static_cast<useconds_t>(g_delay_us));
}
void install_delay() {
  const char* spec = std::getenv("GPHASH_CRASH_DELAY");
  if (!spec || !*spec) return;
  const char* colon = std::strrchr(spec, ':');
  const std::string name = colon ? std::string(spec, colon) : std::string(spec);
  g_delay_point = crash::index_of(name.c_str());
  g_delay_us = colon ? std::atoll(colon + 1) : 100;
  if (g_delay_point < 0) throw std::invalid_argument("GPHASH_CRASH_DELAY names no crash point: " + name);
  crash::set_observer(&delay_at_point);
}
#else
void install_delay() {
  if (const char* spec = std::getenv("GPHASH_CRASH_DELAY"); spec && *spec)
    throw std::invalid_argument("GPHASH_CRASH_DELAY needs a build with -DGPHASH_CRASH_POINTS=ON");
}
#endif

std::vector<uint64_t> crash_point_hits() {
  std::vector<uint64_t> hits;
#if GPHASH_CRASH_POINTS
  if (crash::counting())
    for (int i = 0; i < crash::kPointCount; ++i) hits.push_back(crash::hit_count(i));
#endif
  return hits;
}

struct Args {
  std::string pool;
  int report_fd = 3;
  bool create = false;
  uint32_t capacity = 64;
  std::string shape = "2L-2H-8S";
  std::string index = "gphash";
  uint32_t segment_bytes = 16384;  // HMEH
  std::string engine = "cpu";
  int threads = 2;
  bool no_tag_mirror = false;
  uint64_t seed = 1;
  uint64_t first_batch = 0;
  int64_t max_batches = -1;  // -1: forever
  // GPU engine: BktCache loads every this many operations. Small, so that crash workloads kill and
  // trap the engine while loading phases are in flight and hits are served from cached lines.
  uint64_t cache_reload = 256;
  double cache_fraction = 0.5;  // of the buckets; 1: a complete copy (bucket_cache.cuh)
  WorkloadParams params;
};

int run(const Args& a, ReportWriter& out) {
  install_delay();
  OpenOptions options;
  options.engine = a.engine == "gpu" ? EngineKind::kGpu : EngineKind::kCpu;
  options.threads = a.threads;
  options.tag_mirror = !a.no_tag_mirror;
  // Past the default 0.9 the workload's inserts displace items, so the sweep reaches every step
  // of a move (at 0.9 its growing table resized before any insert needed one).
  options.max_load_factor = 0.95;
  options.cache.policy = CachePolicy::kLfu;  // on, whatever the default
  options.cache.reload_operations = a.cache_reload;
  options.cache.fraction = a.cache_fraction;
  out.opening();
  Table table = [&] {
    if (!a.create) return Table::open(a.pool, options);
    TableConfig config;
    config.key_width = a.params.key_width;
    config.value_width = a.params.value_width;
    config.shape = parse_shape(a.shape);
    config.index = a.index == "hmeh" ? IndexKind::kHmeh : IndexKind::kGphash;
    config.hmeh.segment_bytes = a.segment_bytes;
    config.capacity = a.capacity;
    config.hash_seed = a.seed;
    options.replace = true;
    return Table::create(a.pool, config, options);
  }();
  const TableInfo info = table.info();
  if (info.key_width != a.params.key_width || info.value_width != a.params.value_width)
    throw Error(ErrorCode::kInvalidArgument, "the pool's widths differ from --key-width / --value-width");
  out.opened({info.recovered, info.open_seconds, info.items, crash_point_hits()});

  BatchBuffers buffers;
  for (uint64_t b = a.first_batch; a.max_batches < 0 || b < a.first_batch + static_cast<uint64_t>(a.max_batches); ++b) {
    const std::vector<PlannedOp> plan = plan_batch(a.params, a.seed, b);
    fill_buffers(a.params, plan, buffers);
    out.begin(b, plan);
    table.execute(buffers.batch(a.params));
    std::vector<uint64_t> seen(plan.size(), 0);
    for (size_t i = 0; i < plan.size(); ++i)
      if (plan[i].op == Op::kSearch && buffers.status[i] == OpStatus::kOk)
        seen[i] = read_version(plan[i].record, buffers.out.data() + i * a.params.value_width, a.params.value_width);
    out.ack(b, buffers.status, seen);
    if (std::find(seen.begin(), seen.end(), kTorn) != seen.end()) {
      // The parent will fail the run; say what the table looks like now, while it still can.
      const CheckResult check = table.check();
      std::fprintf(stderr, "crash_child: batch %llu read a torn value; check: %s\n", static_cast<unsigned long long>(b),
                   check.ok ? "ok" : check.violation.c_str());
    }
  }
  table.close();
  out.done(crash_point_hits());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"gphash crash-test child: runs batches on a pool until killed"};
  app.add_option("--pool", a.pool, "pool path")->required();
  app.add_option("--report-fd", a.report_fd, "file descriptor for the BEGIN/ACK stream");
  app.add_flag("--create", a.create, "create (replace) the pool instead of opening it");
  app.add_option("--capacity", a.capacity, "initial capacity of a created pool (small: many resizes)");
  app.add_option("--shape", a.shape, "shape of a created pool (GPHash)");
  app.add_option("--index", a.index, "index of a created pool")->check(CLI::IsMember({"gphash", "hmeh"}));
  app.add_option("--segment-bytes", a.segment_bytes, "segment size of a created HMEH pool");
  app.add_option("--engine", a.engine, "engine")->check(CLI::IsMember({"cpu", "gpu"}));
  app.add_option("--threads", a.threads, "CPU engine threads (1: deterministic store order)");
  app.add_flag("--no-tag-mirror", a.no_tag_mirror, "CPU engine: OpenOptions::tag_mirror off");
  app.add_option("--cache-reload", a.cache_reload, "GPU engine: operations between BktCache loading phases");
  app.add_option("--cache-fraction", a.cache_fraction, "GPU engine: share of the buckets BktCache holds")->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", a.seed, "workload seed (also the hash seed of a created pool)");
  app.add_option("--first-batch", a.first_batch, "number of the first batch (versions are unique per batch number)");
  app.add_option("--max-batches", a.max_batches, "stop after this many batches, close and report DONE");
  app.add_option("--key-width", a.params.key_width)->check(CLI::IsMember({8u, 16u, 32u}));
  app.add_option("--value-width", a.params.value_width)->check(CLI::Range(4u, 4096u));
  app.add_option("--key-space-start", a.params.key_space_start);
  app.add_option("--key-space-doubling", a.params.key_space_doubling);
  app.add_option("--key-space-growth", a.params.key_space_growth);
  app.add_option("--key-space-max", a.params.key_space_max);
  app.add_option("--max-batch-ops", a.params.max_batch_ops)->check(CLI::Range(2u, 4000u));
  CLI11_PARSE(app, argc, argv);

  ReportWriter out(a.report_fd);
  try {
    return run(a, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crash_child: %s\n", e.what());
    out.error(e.what());
    return 2;
  }
}

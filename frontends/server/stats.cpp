#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "gphash/table.h"
#include "server.h"

namespace gphash::server {

namespace {

template <class T>
void stat(std::string& out, std::string_view name, const T& value) {
  fmt::format_to(std::back_inserter(out), "STAT {} {}\r\n", name, value);
}

double seconds(uint64_t ns) { return static_cast<double>(ns) / 1e9; }

// Summed over the partitions' stores and schedulers (one of each per partition).
uint64_t total(const ServerContext& ctx, kv::Counter kv::KvCounters::*field) {
  uint64_t sum = 0;
  for (const kv::KvStore* store : ctx.stores) sum += (store->counters().*field).load();
  return sum;
}
uint64_t total(const ServerContext& ctx, kv::Counter Scheduler::Stats::*field) {
  uint64_t sum = 0;
  for (const Scheduler* scheduler : ctx.schedulers) sum += (scheduler->stats().*field).load();
  return sum;
}
uint64_t total(const ServerContext& ctx, std::atomic<uint64_t> WorkerCounters::*field) {
  uint64_t sum = 0;
  for (const Worker* worker : ctx.workers) sum += (worker->counters().*field).load(std::memory_order_relaxed);
  return sum;
}
uint64_t limit_bytes(const ServerContext& ctx) {
  uint64_t sum = 0;
  for (const kv::KvStore* store : ctx.stores) sum += store->limit_bytes();
  return sum;
}

void general(std::string& out, const ServerContext& ctx) {
  const auto& n = ctx.counters;
  const auto now = std::chrono::system_clock::now();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  stat(out, "pid", getpid());
  stat(out, "uptime", std::chrono::duration_cast<std::chrono::seconds>(now - ctx.started).count());
  stat(out, "time", std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count());
  stat(out, "version", kVersion);
  stat(out, "pointer_size", sizeof(void*) * 8);
  stat(out, "rusage_user", fmt::format("{}.{:06}", ru.ru_utime.tv_sec, ru.ru_utime.tv_usec));
  stat(out, "rusage_system", fmt::format("{}.{:06}", ru.ru_stime.tv_sec, ru.ru_stime.tv_usec));
  stat(out, "max_connections", ctx.options.max_connections);
  stat(out, "curr_connections", n.curr_connections.load());
  stat(out, "total_connections", n.total_connections.load());
  stat(out, "rejected_connections", n.rejected_connections.load());
  stat(out, "cmd_get", total(ctx, &kv::KvCounters::cmd_get));
  stat(out, "cmd_set", total(ctx, &kv::KvCounters::cmd_set));
  stat(out, "cmd_flush", total(ctx, &kv::KvCounters::cmd_flush));
  stat(out, "cmd_touch", total(ctx, &kv::KvCounters::cmd_touch));
  stat(out, "get_hits", total(ctx, &kv::KvCounters::get_hits));
  stat(out, "get_misses", total(ctx, &kv::KvCounters::get_misses));
  stat(out, "get_expired", total(ctx, &kv::KvCounters::get_expired));
  stat(out, "get_flushed", total(ctx, &kv::KvCounters::get_flushed));
  stat(out, "delete_misses", total(ctx, &kv::KvCounters::delete_misses));
  stat(out, "delete_hits", total(ctx, &kv::KvCounters::delete_hits));
  stat(out, "incr_misses", total(ctx, &kv::KvCounters::incr_misses));
  stat(out, "incr_hits", total(ctx, &kv::KvCounters::incr_hits));
  stat(out, "decr_misses", total(ctx, &kv::KvCounters::decr_misses));
  stat(out, "decr_hits", total(ctx, &kv::KvCounters::decr_hits));
  stat(out, "cas_misses", total(ctx, &kv::KvCounters::cas_misses));
  stat(out, "cas_hits", total(ctx, &kv::KvCounters::cas_hits));
  stat(out, "cas_badval", total(ctx, &kv::KvCounters::cas_badval));
  stat(out, "touch_hits", total(ctx, &kv::KvCounters::touch_hits));
  stat(out, "touch_misses", total(ctx, &kv::KvCounters::touch_misses));
  stat(out, "auth_cmds", n.auth_cmds.load());
  stat(out, "auth_errors", n.auth_errors.load());
  stat(out, "bytes_read", total(ctx, &WorkerCounters::bytes_read));
  stat(out, "bytes_written", total(ctx, &WorkerCounters::bytes_written));
  stat(out, "limit_maxbytes", limit_bytes(ctx));
  stat(out, "threads", ctx.options.threads);
  stat(out, "conn_yields", total(ctx, &WorkerCounters::conn_yields));
  stat(out, "bytes", total(ctx, &kv::KvCounters::bytes));
  stat(out, "curr_items", total(ctx, &kv::KvCounters::curr_items));
  stat(out, "total_items", total(ctx, &kv::KvCounters::total_items));
  stat(out, "expired_unfetched", total(ctx, &kv::KvCounters::expired_unfetched));
  stat(out, "evicted_unfetched", total(ctx, &kv::KvCounters::evicted_unfetched));
  stat(out, "evictions", total(ctx, &kv::KvCounters::evictions));
  stat(out, "reclaimed", total(ctx, &kv::KvCounters::reclaimed));
  // gphash's own: the mode, the index, Mega-KV's rounds and where the time goes.
  uint64_t max_round = 0;
  for (const Scheduler* scheduler : ctx.schedulers) max_round = std::max<uint64_t>(max_round, scheduler->stats().max_round.load());
  stat(out, "gphash_mode", ctx.options.mode == kv::Mode::kStore ? "store" : "cache");
  stat(out, "gphash_index_engine", ctx.stores.front()->index_engine());
  // The index starts with room for 2^hashpower items (-o hashpower) and doubles as they come.
  uint64_t slots = 0, resizes = 0;
  for (kv::KvStore* store : ctx.stores) {
    const TableInfo info = store->table().info();
    slots += info.slots;
    resizes += info.resizes;
  }
  stat(out, "gphash_index_slots", slots);
  stat(out, "gphash_index_resizes", resizes);
  stat(out, "gphash_out_of_memory", total(ctx, &kv::KvCounters::out_of_memory));
  stat(out, "gphash_signature_collisions", total(ctx, &kv::KvCounters::signature_collisions));
  stat(out, "gphash_rounds", total(ctx, &Scheduler::Stats::rounds));
  stat(out, "gphash_round_commands", total(ctx, &Scheduler::Stats::commands));
  stat(out, "gphash_round_max_commands", max_round);
  stat(out, "gphash_rounds_by_size", total(ctx, &Scheduler::Stats::by_size));
  stat(out, "gphash_rounds_by_period", total(ctx, &Scheduler::Stats::by_period));
  stat(out, "gphash_round_handoffs", total(ctx, &Scheduler::Stats::handoffs));
  stat(out, "gphash_index_search_ops", total(ctx, &kv::KvCounters::search_ops));
  stat(out, "gphash_index_write_ops", total(ctx, &kv::KvCounters::write_ops));
  stat(out, "gphash_seconds_batch_wait", fmt::format("{:.6f}", seconds(total(ctx, &Scheduler::Stats::wait_ns))));
  stat(out, "gphash_seconds_round", fmt::format("{:.6f}", seconds(total(ctx, &Scheduler::Stats::round_ns))));
  stat(out, "gphash_seconds_index", fmt::format("{:.6f}", seconds(total(ctx, &kv::KvCounters::index_ns))));
  stat(out, "gphash_seconds_resolve", fmt::format("{:.6f}", seconds(total(ctx, &kv::KvCounters::resolve_ns))));
  stat(out, "gphash_seconds_read", fmt::format("{:.6f}", seconds(total(ctx, &WorkerCounters::read_ns))));
  stat(out, "gphash_seconds_parse", fmt::format("{:.6f}", seconds(total(ctx, &WorkerCounters::parse_ns))));
  stat(out, "gphash_seconds_reply", fmt::format("{:.6f}", seconds(total(ctx, &WorkerCounters::reply_ns))));
  stat(out, "gphash_seconds_write", fmt::format("{:.6f}", seconds(total(ctx, &WorkerCounters::write_ns))));
  stat(out, "gphash_reads_paused", total(ctx, &WorkerCounters::reads_paused));
  kv::RecoveryReport r;  // the partitions' together (each opens its own pool, one after another)
  for (const kv::KvStore* store : ctx.stores) {
    const kv::RecoveryReport& p = store->recovery();
    r.recovered |= p.recovered;
    r.live += p.live;
    r.freed += p.freed;
    r.seconds += p.seconds;
  }
  stat(out, "gphash_recovered", r.recovered ? 1 : 0);
  stat(out, "gphash_recovery_live_items", r.live);
  stat(out, "gphash_recovery_freed_chunks", r.freed);
  stat(out, "gphash_recovery_seconds", fmt::format("{:.6f}", r.seconds));
  if (!ctx.options.snapshots.path.empty()) {
    // Partitions snapshot one by one, each to its own file (FILE.part<k>of<N>): a snapshot is whole
    // when every partition has taken it, so the count and the time are the oldest partition's.
    uint64_t taken = UINT64_MAX, last = UINT64_MAX, writes = 0;
    std::string error = "none";
    for (kv::KvStore* store : ctx.stores) {
      const TableInfo info = store->table().info();
      taken = std::min<uint64_t>(taken, info.snapshots_taken);
      last = std::min<uint64_t>(last, info.last_snapshot_unix_ns / 1000000000);
      writes += info.writes_since_snapshot;
      if (error == "none" && !info.snapshot_error.empty()) error = info.snapshot_error;
    }
    stat(out, "gphash_snapshot_file", ctx.stores.size() == 1 ? ctx.stores.front()->table().info().snapshot_path : ctx.options.snapshots.path + ".part*");
    stat(out, "gphash_snapshots_taken", taken);
    stat(out, "gphash_snapshot_last_unix", last);
    stat(out, "gphash_snapshot_writes_since", writes);
    // A stat value is one word: the error's spaces become underscores.
    std::replace_if(error.begin(), error.end(), [](char c) { return c == ' ' || c == '\r' || c == '\n'; }, '_');
    stat(out, "gphash_snapshot_error", error);
  }
}

void settings(std::string& out, const ServerContext& ctx) {
  const Options& o = ctx.options;
  stat(out, "maxbytes", limit_bytes(ctx));
  stat(out, "maxconns", o.max_connections);
  stat(out, "tcpport", o.port);
  stat(out, "udpport", o.udp_port);
  stat(out, "inter", o.listen);
  stat(out, "verbosity", ctx.verbosity.load());
  stat(out, "evictions", o.mode == kv::Mode::kCache ? "on" : "off");
  stat(out, "growth_factor", fmt::format("{:.2f}", o.growth_factor));
  stat(out, "num_threads", o.threads);
  stat(out, "cas_enabled", "yes");
  stat(out, "item_size_max", o.item_size_max);
  stat(out, "auth_enabled_ascii", ctx.auth.empty() ? "no" : "yes");
  stat(out, "binding_protocol", "ascii");
  stat(out, "gphash_mode", o.mode == kv::Mode::kStore ? "store" : "cache");
  stat(out, "gphash_pool", o.pool.empty() ? "mem:" : o.pool);
  stat(out, "gphash_engine", o.engine == EngineKind::kGpu ? "gpu" : "cpu");
  stat(out, "gphash_index_shards", o.index_shards.size());
  stat(out, "gphash_partitions", o.partitions);
  stat(out, "gphash_batch_size", o.batch_size);
  stat(out, "gphash_batch_period_us", o.batch_period.count());
  stat(out, "gphash_pipeline", ctx.stores.front()->pipelined() ? "on" : "off");
  stat(out, "gphash_conn_buffer_limit", o.conn_buffer_limit);
  stat(out, "gphash_io_uring", ctx.io_uring ? "on" : "off");
}

void slabs(std::string& out, const ServerContext& ctx, bool items) {
  std::vector<kv::SlabClassStats> classes;  // the partitions' slab classes are alike: summed
  for (const Scheduler* scheduler : ctx.schedulers) {
    const auto part = scheduler->slab_snapshot();
    if (classes.size() < part.size()) classes.resize(part.size());
    for (size_t i = 0; i < part.size(); ++i) {
      classes[i].chunk_size = part[i].chunk_size;
      classes[i].pages += part[i].pages;
      classes[i].used_chunks += part[i].used_chunks;
      classes[i].free_chunks += part[i].free_chunks;
    }
  }
  uint64_t pages = 0;
  for (size_t i = 0; i < classes.size(); ++i) {
    const auto& c = classes[i];
    pages += c.pages;
    if (c.pages == 0) continue;
    const size_t id = i + 1;
    if (items) {
      fmt::format_to(std::back_inserter(out), "STAT items:{}:number {}\r\n", id, c.used_chunks);
      continue;
    }
    const uint64_t per_page = c.chunk_size ? ctx.stores.front()->page_size() / c.chunk_size : 0;
    fmt::format_to(std::back_inserter(out), "STAT {}:chunk_size {}\r\n", id, c.chunk_size);
    fmt::format_to(std::back_inserter(out), "STAT {}:chunks_per_page {}\r\n", id, per_page);
    fmt::format_to(std::back_inserter(out), "STAT {}:total_pages {}\r\n", id, c.pages);
    fmt::format_to(std::back_inserter(out), "STAT {}:total_chunks {}\r\n", id, c.used_chunks + c.free_chunks);
    fmt::format_to(std::back_inserter(out), "STAT {}:used_chunks {}\r\n", id, c.used_chunks);
    fmt::format_to(std::back_inserter(out), "STAT {}:free_chunks {}\r\n", id, c.free_chunks);
  }
  if (!items) {
    stat(out, "active_slabs", std::count_if(classes.begin(), classes.end(), [](auto& c) { return c.pages > 0; }));
    stat(out, "total_malloced", pages * ctx.stores.front()->page_size());
  }
}

}  // namespace

std::string render_stats(const ServerContext& ctx, std::string_view args) {
  std::string out;
  while (!args.empty() && (args.back() == ' ' || args.back() == '\r')) args.remove_suffix(1);
  if (args.empty()) general(out, ctx);
  else if (args == "settings") settings(out, ctx);
  else if (args == "items") slabs(out, ctx, true);
  else if (args == "slabs") slabs(out, ctx, false);
  else if (args == "reset") return "RESET\r\n";
  else if (args == "sizes" || args == "conns" || args == "extstore") {
  } else return "ERROR\r\n";
  out += "END\r\n";
  return out;
}

}  // namespace gphash::server

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

void general(std::string& out, const ServerContext& ctx) {
  const auto& k = ctx.store->counters();
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
  stat(out, "cmd_get", k.cmd_get.load());
  stat(out, "cmd_set", k.cmd_set.load());
  stat(out, "cmd_flush", k.cmd_flush.load());
  stat(out, "cmd_touch", k.cmd_touch.load());
  stat(out, "get_hits", k.get_hits.load());
  stat(out, "get_misses", k.get_misses.load());
  stat(out, "get_expired", k.get_expired.load());
  stat(out, "get_flushed", k.get_flushed.load());
  stat(out, "delete_misses", k.delete_misses.load());
  stat(out, "delete_hits", k.delete_hits.load());
  stat(out, "incr_misses", k.incr_misses.load());
  stat(out, "incr_hits", k.incr_hits.load());
  stat(out, "decr_misses", k.decr_misses.load());
  stat(out, "decr_hits", k.decr_hits.load());
  stat(out, "cas_misses", k.cas_misses.load());
  stat(out, "cas_hits", k.cas_hits.load());
  stat(out, "cas_badval", k.cas_badval.load());
  stat(out, "touch_hits", k.touch_hits.load());
  stat(out, "touch_misses", k.touch_misses.load());
  stat(out, "auth_cmds", n.auth_cmds.load());
  stat(out, "auth_errors", n.auth_errors.load());
  stat(out, "bytes_read", n.bytes_read.load());
  stat(out, "bytes_written", n.bytes_written.load());
  stat(out, "limit_maxbytes", ctx.store->limit_bytes());
  stat(out, "threads", ctx.options.threads);
  stat(out, "conn_yields", n.conn_yields.load());
  stat(out, "bytes", k.bytes.load());
  stat(out, "curr_items", k.curr_items.load());
  stat(out, "total_items", k.total_items.load());
  stat(out, "expired_unfetched", k.expired_unfetched.load());
  stat(out, "evicted_unfetched", k.evicted_unfetched.load());
  stat(out, "evictions", k.evictions.load());
  stat(out, "reclaimed", k.reclaimed.load());
  // gphash's own: the mode, the index, Mega-KV's rounds and where the time goes.
  const auto& s = ctx.scheduler->stats();
  stat(out, "gphash_mode", ctx.options.mode == kv::Mode::kStore ? "store" : "cache");
  stat(out, "gphash_index_engine", ctx.store->index_engine());
  stat(out, "gphash_out_of_memory", k.out_of_memory.load());
  stat(out, "gphash_signature_collisions", k.signature_collisions.load());
  stat(out, "gphash_rounds", s.rounds.load());
  stat(out, "gphash_round_commands", s.commands.load());
  stat(out, "gphash_round_max_commands", s.max_round.load());
  stat(out, "gphash_rounds_by_size", s.by_size.load());
  stat(out, "gphash_rounds_by_period", s.by_period.load());
  stat(out, "gphash_index_search_ops", k.search_ops.load());
  stat(out, "gphash_index_write_ops", k.write_ops.load());
  stat(out, "gphash_seconds_batch_wait", fmt::format("{:.6f}", seconds(s.wait_ns.load())));
  stat(out, "gphash_seconds_round", fmt::format("{:.6f}", seconds(s.round_ns.load())));
  stat(out, "gphash_seconds_index", fmt::format("{:.6f}", seconds(k.index_ns.load())));
  stat(out, "gphash_seconds_resolve", fmt::format("{:.6f}", seconds(k.resolve_ns.load())));
  stat(out, "gphash_seconds_read", fmt::format("{:.6f}", seconds(n.read_ns.load())));
  stat(out, "gphash_seconds_parse", fmt::format("{:.6f}", seconds(n.parse_ns.load())));
  stat(out, "gphash_seconds_reply", fmt::format("{:.6f}", seconds(n.reply_ns.load())));
  stat(out, "gphash_seconds_write", fmt::format("{:.6f}", seconds(n.write_ns.load())));
  stat(out, "gphash_reads_paused", n.reads_paused.load());
  const auto& r = ctx.store->recovery();
  stat(out, "gphash_recovered", r.recovered ? 1 : 0);
  stat(out, "gphash_recovery_live_items", r.live);
  stat(out, "gphash_recovery_freed_chunks", r.freed);
  stat(out, "gphash_recovery_seconds", fmt::format("{:.6f}", r.seconds));
  if (!ctx.options.snapshots.path.empty()) {
    const TableInfo info = ctx.store->table().info();
    stat(out, "gphash_snapshot_file", info.snapshot_path);
    stat(out, "gphash_snapshots_taken", info.snapshots_taken);
    stat(out, "gphash_snapshot_last_unix", info.last_snapshot_unix_ns / 1000000000);
    stat(out, "gphash_snapshot_writes_since", info.writes_since_snapshot);
    // A stat value is one word: the error's spaces become underscores.
    std::string error = info.snapshot_error.empty() ? "none" : info.snapshot_error;
    std::replace_if(error.begin(), error.end(), [](char c) { return c == ' ' || c == '\r' || c == '\n'; }, '_');
    stat(out, "gphash_snapshot_error", error);
  }
}

void settings(std::string& out, const ServerContext& ctx) {
  const Options& o = ctx.options;
  stat(out, "maxbytes", ctx.store->limit_bytes());
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
  stat(out, "gphash_batch_size", o.batch_size);
  stat(out, "gphash_batch_period_us", o.batch_period.count());
  stat(out, "gphash_pipeline", ctx.store->pipelined() ? "on" : "off");
  stat(out, "gphash_conn_buffer_limit", o.conn_buffer_limit);
}

void slabs(std::string& out, const ServerContext& ctx, bool items) {
  const auto classes = ctx.scheduler->slab_snapshot();
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
    const uint64_t per_page = c.chunk_size ? ctx.store->page_size() / c.chunk_size : 0;
    fmt::format_to(std::back_inserter(out), "STAT {}:chunk_size {}\r\n", id, c.chunk_size);
    fmt::format_to(std::back_inserter(out), "STAT {}:chunks_per_page {}\r\n", id, per_page);
    fmt::format_to(std::back_inserter(out), "STAT {}:total_pages {}\r\n", id, c.pages);
    fmt::format_to(std::back_inserter(out), "STAT {}:total_chunks {}\r\n", id, c.used_chunks + c.free_chunks);
    fmt::format_to(std::back_inserter(out), "STAT {}:used_chunks {}\r\n", id, c.used_chunks);
    fmt::format_to(std::back_inserter(out), "STAT {}:free_chunks {}\r\n", id, c.free_chunks);
  }
  if (!items) {
    stat(out, "active_slabs", std::count_if(classes.begin(), classes.end(), [](auto& c) { return c.pages > 0; }));
    stat(out, "total_malloced", pages * ctx.store->page_size());
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

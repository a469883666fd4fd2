// Snapshots to a file (gphash/snapshot.h): `gphash snapshot POOL FILE`, `gphash restore FILE
// POOL`, and the automatic-snapshot options of load, run and bench.
#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <string>

#include "cli.h"
#include "gphash/table.h"

namespace gphash::cli {
namespace {

std::string mib(uint64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20)); }

class SnapshotCommands final : public CommandGroup {
 public:
  void add(CLI::App& app, OptionRegistry& o) override {
    snapshot_ = app.add_subcommand(
        "snapshot", "Write a consistent snapshot of a pool to a file on a real file system (durable when it returns)");
    o.text(snapshot_, "POOL", pool_, "Pool (not open for writing elsewhere: a writer takes its own snapshots)")->required();
    o.text(snapshot_, "FILE", file_, "Snapshot file: created, or extended if it holds this pool's snapshots")->required();
    o.file_mode(snapshot_, "--mode", mode_, "Permissions of a new snapshot file (default 0600)");
    restore_ = app.add_subcommand("restore", "Create a pool from the last snapshot in a file");
    o.text(restore_, "FILE", file_, "Snapshot file")->required();
    o.text(restore_, "POOL", pool_, "Pool to create")->required();
    o.flag(restore_, "--replace", replace_, "Replace an existing pool at the path (refused while it is open)");
    o.file_mode(restore_, "--mode", mode_, "Permissions of the pool file (default 0600)");
    o.number(restore_, "--threads", threads_, 0, kMaxThreads, "Threads of the recovery pass (0 = all)");
  }

  std::optional<int> run() override {
    if (*snapshot_) {
      OpenOptions options;
      options.snapshots.file_mode = mode_;
      Table t = Table::open(pool_, options);
      const SnapshotResult r = t.snapshot(file_);
      fmt::print("snapshot of {} written to {}: {}, {} pages ({}) in {:.1f} ms; writes were held off {:.2f} ms\n",
                 pool_, file_, r.full ? "a full image" : fmt::format("delta {} of its chain", r.sequence),
                 r.pages_written, mib(r.bytes_written), 1e3 * r.seconds, 1e3 * r.writers_held_seconds);
      return 0;
    }
    if (*restore_) {
      RestoreOptions options;
      options.replace = replace_;
      options.pool_file_mode = mode_;
      options.threads = threads_;
      const RestoreResult r = Table::restore(file_, pool_, options);
      fmt::print("restored {} from {}: {} items as of {} ({} segments, {} pages read, {:.1f} ms)\n", pool_, file_, r.items,
                 describe_time(r.captured_unix_ns), r.segments, r.pages_read, 1e3 * r.seconds);
      return 0;
    }
    return std::nullopt;
  }

 private:
  std::string pool_, file_;
  uint32_t mode_ = 0600;
  bool replace_ = false;
  int threads_ = 0;
  CLI::App *snapshot_ = nullptr, *restore_ = nullptr;
};

}  // namespace

std::unique_ptr<CommandGroup> make_snapshot_commands() { return std::make_unique<SnapshotCommands>(); }

void add_snapshot_options(CLI::App* app, OptionRegistry& o, SnapshotOptions& s) {
  o.text(app, "--snapshot", s.path,
         "Snapshot file for automatic snapshots (with an interval below; a last one at the end), and to restore the pool "
         "from if it is missing");
  o.real(app, "--snapshot-every-seconds", s.every_seconds, 0, 1e6, "Take a snapshot every N seconds of writes");
  o.number(app, "--snapshot-every-batches", s.every_batches, 1, kMaxOperations, "Take a snapshot every N writing batches");
  o.file_mode(app, "--snapshot-mode", s.file_mode, "Permissions of a new snapshot file (default 0600)");
}

std::string describe_time(uint64_t unix_ns) {
  if (unix_ns == 0) return "never";
  const std::time_t t = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &utc);
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const double ago = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()) * 1e-9 -
                     static_cast<double>(unix_ns) * 1e-9;
  return fmt::format("{} ({:.0f} s ago)", text, ago < 0 ? 0.0 : ago);
}

void finish_snapshots(Table& table, const SnapshotOptions& snapshots) {
  if (snapshots.path.empty()) return;
  // The last snapshot (with automatic ones too: close() then finds nothing left to take), read
  // back before close() lets go of the table.
  table.snapshot();
  const TableInfo i = table.info();
  table.close();
  if (i.snapshots_taken == 0) return;
  const SnapshotResult& r = i.last_snapshot;
  fmt::print("snapshots: {} taken to {}; the last: {}, {} pages ({}) in {:.1f} ms, writes held off {:.2f} ms\n",
             i.snapshots_taken, i.snapshot_path, r.full ? "a full image" : fmt::format("delta {}", r.sequence),
             r.pages_written, mib(r.bytes_written), 1e3 * r.seconds, 1e3 * r.writers_held_seconds);
}

}  // namespace gphash::cli

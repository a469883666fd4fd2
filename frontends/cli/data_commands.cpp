// The data tools: put, get, del, dump, import and stats. Keys and values are given as text,
// zero-padded to the pool's widths, or as hex with --hex; a key or value longer than its width is
// an error that names the width.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "gphash/dump.h"
#include "gphash/table.h"

namespace gphash::cli {
namespace {

// Bytes of a key or value argument, padded with zeros to `width`.
std::string field_bytes(const std::string& text, bool hex, uint32_t width, const char* what) {
  std::string bytes;
  if (hex) {
    if (text.size() % 2 != 0 || text.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
      throw Error(ErrorCode::kInvalidArgument, fmt::format("{} '{}' is not hex (two digits per byte)", what, text), what);
    for (size_t i = 0; i < text.size(); i += 2) bytes += static_cast<char>(std::stoi(text.substr(i, 2), nullptr, 16));
  } else {
    bytes = text;
  }
  if (bytes.size() > width)
    throw Error(what == std::string("key") ? ErrorCode::kKeyWidthMismatch : ErrorCode::kValueWidthMismatch,
                fmt::format("{} has {} bytes; this pool's {}s are {} bytes wide (shorter ones are zero-padded)", what,
                            bytes.size(), what, width),
                what == std::string("key") ? "key_width" : "value_width");
  bytes.resize(width, '\0');
  return bytes;
}

std::string hex_of(const std::string& bytes) {
  std::string s;
  for (unsigned char c : bytes) s += fmt::format("{:02x}", c);
  return s;
}

// A value as text: without its zero padding; hex when it holds bytes that are not printable text.
std::string show(const std::string& bytes, bool hex) {
  if (hex) return hex_of(bytes);
  std::string text = bytes.substr(0, bytes.find_last_not_of('\0') + 1);
  for (unsigned char c : text)
    if (c < 0x20 || c == 0x7f) return "hex:" + hex_of(bytes);
  return text;
}

OpStatus one(Table& t, Op op, const std::string& key, const std::string* value, std::string* out) {
  OpStatus status = OpStatus::kOk;
  Batch b;
  b.size = 1;
  b.key_width = t.key_width();
  b.value_width = t.value_width();
  b.op = op;
  alignas(8) char key_buf[32];
  std::memcpy(key_buf, key.data(), key.size());
  b.keys = key_buf;
  b.values = value ? value->data() : nullptr;
  if (out) {
    out->assign(t.value_width(), '\0');
    b.values_out = out->data();
  }
  b.status = &status;
  t.execute(b);
  return status;
}

class DataCommands final : public CommandGroup {
 public:
  void add(CLI::App& app, OptionRegistry& o) override {
    auto common = [&](CLI::App* c) {
      o.text(c, "POOL", pool_, "Pool")->required();
      o.flag(c, "--hex", hex_, "Keys and values in hex (two digits per byte)");
      o.choice(c, "--engine", engine_, {"cpu", "gpu"}, "Engine");
    };
    put_ = app.add_subcommand("put", "Store a value under a key (insert or overwrite)");
    common(put_);
    o.text(put_, "KEY", key_, "Key")->required();
    o.text(put_, "VALUE", value_, "Value")->required();
    get_ = app.add_subcommand("get", "Print the value of a key (exit 1 and `not found` if absent)");
    common(get_);
    o.text(get_, "KEY", key_, "Key")->required();
    del_ = app.add_subcommand("del", "Remove a key (exit 1 and `not found` if absent)");
    common(del_);
    o.text(del_, "KEY", key_, "Key")->required();
    dump_ = app.add_subcommand("dump", "Write every item of a pool to a file (or stdout)");
    common(dump_);
    o.choice(dump_, "--format", format_, {"jsonl", "binary"}, "Dump format");
    o.text(dump_, "-o,--output", output_, "File to write (default: stdout; binary needs a file)");
    o.file_mode(dump_, "--mode", mode_, "Permissions of the dump file (default 0600)");
    import_ = app.add_subcommand("import", "Store every item of a dump in a pool (existing keys are overwritten)");
    common(import_);
    o.text(import_, "FILE", input_, "Dump to read (jsonl or binary, recognised by its content)")->required();
    stats_ = app.add_subcommand("stats", "Open a pool and show its live statistics");
    common(stats_);
    o.flag(stats_, "--json", json_, "Print JSON");
  }

  std::optional<int> run() override {
    if (!(*put_ || *get_ || *del_ || *dump_ || *import_ || *stats_)) return std::nullopt;
    OpenOptions options;
    options.engine = engine_ == "gpu" ? EngineKind::kGpu : EngineKind::kCpu;
    options.read_only = *get_ || *dump_ || *stats_;
    if (*import_) return import(options);
    Table t = Table::open(pool_, options);
    if (*stats_) return stats(t);
    if (*dump_) return dump(t);
    const std::string key = field_bytes(key_, hex_, t.key_width(), "key");
    if (*put_) {
      const std::string value = field_bytes(value_, hex_, t.value_width(), "value");
      const OpStatus s = one(t, Op::kUpsert, key, &value, nullptr);
      if (s != OpStatus::kOk) return fail(s);
      fmt::print("ok\n");
      return 0;
    }
    if (*get_) {
      std::string value;
      const OpStatus s = one(t, Op::kSearch, key, nullptr, &value);
      if (s != OpStatus::kOk) return fail(s);
      fmt::print("{}\n", show(value, hex_));
      return 0;
    }
    const OpStatus s = one(t, Op::kErase, key, nullptr, nullptr);
    if (s != OpStatus::kOk) return fail(s);
    fmt::print("deleted\n");
    return 0;
  }

 private:
  static int fail(OpStatus s) {
    fmt::print(stderr, "{}\n", to_string(s));
    return 1;
  }

  int dump(Table& t) {
    if (format_ == "binary" && output_.empty())
      throw Error(ErrorCode::kInvalidArgument, "a binary dump needs a file: -o FILE", "output");
    DumpOptions d;
    d.format = format_ == "binary" ? DumpFormat::kBinary : DumpFormat::kJsonl;
    d.file_mode = mode_;
    const DumpResult r = output_.empty() ? dump_table(t, stdout, d) : dump_table(t, output_, d);
    if (!output_.empty()) fmt::print(stderr, "dumped {} items to {}\n", r.items, output_);
    if (r.damaged) {
      fmt::print(stderr, "{} items were left out: their values fail their checksums (`gphash check` locates them)\n",
                 r.damaged);
      return 1;
    }
    return 0;
  }

  int import(const OpenOptions& options) {
    Table t = Table::open(pool_, options);
    const ImportResult r = import_dump(t, input_);
    fmt::print("imported {} items\n", r.items);
    if (r.failed) {
      fmt::print(stderr, "{} items could not be stored (the pool is full)\n", r.failed);
      return 1;
    }
    return 0;
  }

  int stats(Table& t) {
    const TableInfo i = t.info();
    const TableStats s = t.stats();
    if (json_) {
      nlohmann::json j = {{"items", i.items},         {"slots", i.slots},        {"load_factor", i.load_factor},
                          {"levels", {}},             {"heap_cells", s.heap_cells}, {"heap_cells_used", s.heap_cells_used},
                          {"pool_bytes", i.pool_bytes}, {"engine", i.engine},    {"recovered", i.recovered},
                          {"index", i.index}};
      if (i.index == "hmeh") {
        j["segments"] = s.segments;
        j["levels"] = nlohmann::json::array();
      }
      for (const LevelStats& l : s.levels)
        j["levels"].push_back({{"level", l.level}, {"slots", l.slots}, {"items", l.items}});
      fmt::print("{}\n", j.dump(2));
      return 0;
    }
    fmt::print("pool           {} ({} engine{})\n", i.path, i.engine, i.recovered ? ", recovered at open" : "");
    fmt::print("items          {} in {} slots (load factor {:.3f})\n", i.items, i.slots, i.load_factor);
    if (i.index == "hmeh") fmt::print("segments       {}\n", s.segments);
    for (const LevelStats& l : s.levels)
      fmt::print("level {:<8} {} items in {} slots ({:.3f})\n", l.level, l.items, l.slots,
                 l.slots ? static_cast<double>(l.items) / static_cast<double>(l.slots) : 0.0);
    if (s.heap_cells)
      fmt::print("value heap     {} of {} cells in use ({:.3f})\n", s.heap_cells_used, s.heap_cells,
                 static_cast<double>(s.heap_cells_used) / static_cast<double>(s.heap_cells));
    return 0;
  }

  std::string pool_, key_, value_, output_, input_, format_ = "jsonl", engine_ = "cpu";
  bool hex_ = false, json_ = false;
  uint32_t mode_ = 0600;
  CLI::App *put_ = nullptr, *get_ = nullptr, *del_ = nullptr, *dump_ = nullptr, *import_ = nullptr, *stats_ = nullptr;
};

}  // namespace

std::unique_ptr<CommandGroup> make_data_commands() { return std::make_unique<DataCommands>(); }

}  // namespace gphash::cli

#include "gphash/dump.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace gphash {
namespace {

constexpr char kBinaryMagic[8] = {'G', 'P', 'H', 'D', 'U', 'M', 'P', '1'};
constexpr char kBinaryEnd[8] = {'G', 'P', 'H', 'D', 'E', 'N', 'D', '1'};

struct BinaryHeader {
  char magic[8];
  uint32_t version;  // 1
  uint32_t key_width;
  uint32_t value_width;
  uint32_t reserved[3];
};
static_assert(sizeof(BinaryHeader) == 32);

struct BinaryTrailer {
  char magic[8];
  uint64_t items;
  uint64_t checksum;  // XXH64 (seed 0) of the header and every record
  uint64_t reserved;
};
static_assert(sizeof(BinaryTrailer) == 32);

[[noreturn]] void corrupt(const std::string& path, const std::string& why) {
  throw Error(ErrorCode::kCorruptFile, fmt::format("{} is not a usable gphash dump: {}", path, why));
}

std::string hex(const std::byte* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<unsigned char>(p[i]);
    s[2 * i] = digits[b >> 4];
    s[2 * i + 1] = digits[b & 15];
  }
  return s;
}

bool unhex(const std::string& s, size_t width, std::byte* out) {
  if (s.size() != 2 * width) return false;
  for (size_t i = 0; i < width; ++i) {
    int v = 0;
    for (int k = 0; k < 2; ++k) {
      const char c = s[2 * i + k];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return false;
      v = v * 16 + d;
    }
    out[i] = static_cast<std::byte>(v);
  }
  return true;
}

void write_all(std::FILE* out, const void* p, size_t n) {
  if (n && std::fwrite(p, 1, n, out) != n)
    throw Error(ErrorCode::kIo, fmt::format("cannot write the dump: {}", std::strerror(errno)));
}

// Streams every item of `table` to `out` in the chosen format.
DumpResult write_dump(Table& table, std::FILE* out, const DumpOptions& options) {
  const uint32_t kw = table.key_width(), vw = table.value_width();
  DumpResult r;
  XXH64_state_t* sum = XXH64_createState();
  std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> sum_owner(sum, XXH64_freeState);
  XXH64_reset(sum, 0);
  if (options.format == DumpFormat::kBinary) {
    BinaryHeader h{};
    std::memcpy(h.magic, kBinaryMagic, 8);
    h.version = 1;
    h.key_width = kw;
    h.value_width = vw;
    write_all(out, &h, sizeof h);
    XXH64_update(sum, &h, sizeof h);
  } else {
    const std::string line = nlohmann::json{{"gphash_dump", 1}, {"key_width", kw}, {"value_width", vw}}.dump() + "\n";
    write_all(out, line.data(), line.size());
  }
  const size_t chunk = std::max<size_t>(1, options.chunk_items);
  std::vector<std::byte> keys(chunk * kw), values(chunk * vw);
  ExportCursor cursor;
  std::string text;
  while (!cursor.done()) {
    const size_t n = table.export_items(cursor, keys.data(), values.data(), chunk);
    if (options.format == DumpFormat::kBinary) {
      for (size_t i = 0; i < n; ++i) {
        write_all(out, keys.data() + i * kw, kw);
        write_all(out, values.data() + i * vw, vw);
        XXH64_update(sum, keys.data() + i * kw, kw);
        XXH64_update(sum, values.data() + i * vw, vw);
      }
    } else {
      text.clear();
      for (size_t i = 0; i < n; ++i)
        text += fmt::format("{{\"k\":\"{}\",\"v\":\"{}\"}}\n", hex(keys.data() + i * kw, kw), hex(values.data() + i * vw, vw));
      write_all(out, text.data(), text.size());
    }
  }
  r.items = cursor.exported;
  r.damaged = cursor.damaged;
  if (options.format == DumpFormat::kBinary) {
    BinaryTrailer t{};
    std::memcpy(t.magic, kBinaryEnd, 8);
    t.items = r.items;
    t.checksum = XXH64_digest(sum);
    write_all(out, &t, sizeof t);
  } else {
    const std::string line = nlohmann::json{{"end", true}, {"items", r.items}}.dump() + "\n";
    write_all(out, line.data(), line.size());
  }
  if (std::fflush(out) != 0) throw Error(ErrorCode::kIo, fmt::format("cannot write the dump: {}", std::strerror(errno)));
  return r;
}

// Reads a whole dump, calling `item(key, value)` for each, after checking its framing: the
// header's widths against the table's, every line or record, the end marker and (binary) the
// checksum. With `apply` false it only checks.
template <class F>
uint64_t read_dump(const std::string& path, uint32_t kw, uint32_t vw, F&& item) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) throw Error(ErrorCode::kNotFound, fmt::format("no dump at {}", path));
    throw Error(ErrorCode::kIo, fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  }
  char magic[8] = {};
  in.read(magic, 8);
  in.clear();
  in.seekg(0);
  auto check_widths = [&](uint64_t k, uint64_t v) {
    if (k != kw)
      throw Error(ErrorCode::kKeyWidthMismatch, fmt::format("key width mismatch: the dump has {}, the pool {}", k, kw),
                  "key_width");
    if (v != vw)
      throw Error(ErrorCode::kValueWidthMismatch,
                  fmt::format("value width mismatch: the dump has {}, the pool {}", v, vw), "value_width");
  };
  std::vector<std::byte> key(kw), value(vw);
  if (std::memcmp(magic, kBinaryMagic, 8) == 0) {
    BinaryHeader h{};
    if (!in.read(reinterpret_cast<char*>(&h), sizeof h)) corrupt(path, "its header is cut off");
    if (h.version != 1) corrupt(path, fmt::format("binary dump version {} is not 1", h.version));
    check_widths(h.key_width, h.value_width);
    in.seekg(0, std::ios::end);
    const uint64_t size = static_cast<uint64_t>(in.tellg());
    const uint64_t record = uint64_t{kw} + vw;
    if (size < sizeof h + sizeof(BinaryTrailer) || (size - sizeof h - sizeof(BinaryTrailer)) % record != 0)
      corrupt(path, fmt::format("its size ({} bytes) is not a header, whole records and a trailer", size));
    const uint64_t records = (size - sizeof h - sizeof(BinaryTrailer)) / record;
    in.seekg(sizeof h);
    XXH64_state_t* sum = XXH64_createState();
    std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> sum_owner(sum, XXH64_freeState);
    XXH64_reset(sum, 0);
    XXH64_update(sum, &h, sizeof h);
    for (uint64_t i = 0; i < records; ++i) {
      in.read(reinterpret_cast<char*>(key.data()), kw);
      in.read(reinterpret_cast<char*>(value.data()), vw);
      XXH64_update(sum, key.data(), kw);
      XXH64_update(sum, value.data(), vw);
      item(key.data(), value.data());
    }
    BinaryTrailer t{};
    in.read(reinterpret_cast<char*>(&t), sizeof t);
    if (!in || std::memcmp(t.magic, kBinaryEnd, 8) != 0) corrupt(path, "its end marker is missing (cut off?)");
    if (t.items != records) corrupt(path, fmt::format("its trailer says {} items, it holds {}", t.items, records));
    if (t.checksum != XXH64_digest(sum)) corrupt(path, "its checksum does not match its contents");
    return records;
  }
  std::string line;
  uint64_t items = 0, number = 0;
  bool header = false, end = false;
  while (std::getline(in, line)) {
    ++number;
    if (end) corrupt(path, fmt::format("line {} follows the end line", number));
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) corrupt(path, fmt::format("line {} is not a JSON object", number));
    if (!header) {
      if (!j.contains("gphash_dump") || j["gphash_dump"] != 1 || !j["key_width"].is_number_unsigned() ||
          !j["value_width"].is_number_unsigned())
        corrupt(path, "its first line is not a gphash dump header");
      check_widths(j["key_width"].get<uint64_t>(), j["value_width"].get<uint64_t>());
      header = true;
      continue;
    }
    if (j.contains("end")) {
      if (!j["items"].is_number_unsigned() || j["items"].get<uint64_t>() != items)
        corrupt(path, fmt::format("its end line does not count the {} items before it", items));
      end = true;
      continue;
    }
    if (!j["k"].is_string() || !j["v"].is_string() || !unhex(j["k"].get<std::string>(), kw, key.data()) ||
        !unhex(j["v"].get<std::string>(), vw, value.data()))
      corrupt(path, fmt::format("line {} is not an item of {}-byte keys and {}-byte values in hex", number, kw, vw));
    item(key.data(), value.data());
    ++items;
  }
  if (!header) corrupt(path, "it is empty");
  if (!end) corrupt(path, "its end line is missing (cut off?)");
  return items;
}

}  // namespace

DumpResult dump_table(Table& table, std::FILE* out, const DumpOptions& options) {
  return write_dump(table, out, options);
}

DumpResult dump_table(Table& table, const std::string& path, const DumpOptions& options) {
  std::random_device rd;
  const std::string temp = fmt::format("{}.writing-{}-{:08x}", path, getpid(), rd());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw Error(ErrorCode::kIo, fmt::format("cannot create {}: {}", temp, std::strerror(errno)));
  std::FILE* out = fdopen(fd, "wb");
  DumpResult r;
  try {
    if (!out || fchmod(fd, options.file_mode & 07777) != 0)
      throw Error(ErrorCode::kIo, fmt::format("cannot prepare {}: {}", temp, std::strerror(errno)));
    r = write_dump(table, out, options);
    if (fsync(fd) != 0) throw Error(ErrorCode::kIo, fmt::format("cannot sync {}: {}", temp, std::strerror(errno)));
  } catch (...) {
    if (out) std::fclose(out); else ::close(fd);
    unlink(temp.c_str());
    throw;
  }
  std::fclose(out);
  if (rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(temp.c_str());
    throw Error(ErrorCode::kIo, fmt::format("cannot write {}: {}", path, std::strerror(err)));
  }
  return r;
}

ImportResult import_dump(Table& table, const std::string& path) {
  const uint32_t kw = table.key_width(), vw = table.value_width();
  read_dump(path, kw, vw, [](const std::byte*, const std::byte*) {});  // the whole file first
  ImportResult r;
  constexpr size_t kChunk = size_t{1} << 16;
  std::vector<uint64_t> keys(kChunk * kw / 8);  // 8-byte aligned, as Batch requires
  std::vector<std::byte> values(kChunk * vw);
  std::vector<OpStatus> status(kChunk);
  size_t n = 0;
  auto flush = [&] {
    if (n == 0) return;
    Batch b;
    b.size = n;
    b.key_width = kw;
    b.value_width = vw;
    b.op = Op::kUpsert;
    b.keys = keys.data();
    b.values = values.data();
    b.status = status.data();
    table.execute(b);
    for (size_t i = 0; i < n; ++i) (status[i] == OpStatus::kOk ? r.items : r.failed) += 1;
    n = 0;
  };
  read_dump(path, kw, vw, [&](const std::byte* key, const std::byte* value) {
    std::memcpy(reinterpret_cast<std::byte*>(keys.data()) + n * kw, key, kw);
    std::memcpy(values.data() + n * vw, value, vw);
    if (++n == kChunk) flush();
  });
  flush();
  return r;
}

}  // namespace gphash

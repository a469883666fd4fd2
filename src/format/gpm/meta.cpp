#include "format/gpm/meta.h"

#include <fmt/format.h>

#include <cstring>

#include "format/gpm/checkpoint.h"
#include "format/gpm/log.h"
#include "format/header.h"
#include "gphash/error.h"

namespace gphash::format {

namespace {

[[noreturn]] void corrupt(const std::string& field, const std::string& why) {
  throw Error(ErrorCode::kCorruptHeader, fmt::format("corrupt pool header: {} {}", field, why), field);
}

const char* kind_name(uint32_t kind) {
  switch (kind) {
    case gpm::kObjectRegion: return "region";
    case gpm::kObjectLog: return "log";
    case gpm::kObjectGroup: return "group";
    default: return "?";
  }
}

}  // namespace

void validate_gpm_section(const PoolHeader& ph, std::vector<std::pair<uint64_t, uint64_t>>& extents) {
  const GpmMeta& m = ph.gpm;
  if (m.object_count > gpm::kMaxObjects)
    corrupt("object_count", fmt::format("is {}, more than {}", m.object_count, gpm::kMaxObjects));
  for (uint32_t i = 0; i < gpm::kMaxObjects; ++i) {
    const gpm::Object& o = m.objects[i];
    const std::string field = fmt::format("objects[{}]", i);
    if (i >= m.object_count) {
      static const gpm::Object zero{};
      if (std::memcmp(&o, &zero, sizeof o) != 0) corrupt(field, "is set past object_count");
      continue;
    }
    if (o.kind < gpm::kObjectRegion || o.kind > gpm::kObjectGroup)
      corrupt(field + ".kind", fmt::format("is {}, not 1 (region), 2 (log) or 3 (group)", o.kind));
    if (o.name[0] == '\0' || std::memchr(o.name, '\0', gpm::kNameBytes) == nullptr)
      corrupt(field + ".name", "is empty or not NUL-terminated");
    for (uint32_t j = 0; j < i; ++j)
      if (std::strncmp(o.name, m.objects[j].name, gpm::kNameBytes) == 0)
        corrupt(field + ".name", fmt::format("\"{}\" is also the name of objects[{}]", o.name, j));
    if (o.offset % 4096 != 0 || o.offset < kReservedPrefixBytes)
      corrupt(field + ".offset", fmt::format("is {}, not a 4096-aligned offset past the prefix", o.offset));
    if (o.bytes == 0 || o.bytes > ph.pool_used || o.offset > ph.pool_used - o.bytes)
      corrupt(field + ".bytes", fmt::format("extent [{}, +{}) is empty or past pool_used {}", o.offset, o.bytes, ph.pool_used));
    if ((o.kind == gpm::kObjectLog && o.bytes < gpm::kLogHeaderBytes) ||
        (o.kind == gpm::kObjectGroup && o.bytes < gpm::kGroupHeaderBytes))
      corrupt(field + ".bytes", fmt::format("is {}, too small for a {} header", o.bytes, kind_name(o.kind)));
    extents.push_back({o.offset, o.offset + o.bytes});
  }
}

std::string describe_gpm_section(const PoolHeader& h) {
  std::string out = fmt::format("{:<22} {}\n", "objects", h.gpm.object_count);
  for (uint32_t i = 0; i < h.gpm.object_count && i < gpm::kMaxObjects; ++i) {
    const gpm::Object& o = h.gpm.objects[i];
    out += fmt::format("{:<22} {} {:.32s} at {} ({} bytes)\n", fmt::format("objects[{}]", i), kind_name(o.kind), o.name,
                       o.offset, o.bytes);
  }
  return out;
}

}  // namespace gphash::format

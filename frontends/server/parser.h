// memcached's text and meta protocols: turns bytes from a connection into Requests.
//
// The parser is incremental and never reads past what it was given: it either returns a whole
// request and how many bytes it used, asks for more, or tells the connection to close (a binary
// protocol request, a line too long to be a command). Every malformed request is answered with
// memcached's error line and consumed whole, so the next request starts at a request boundary:
// where the data block's length is known (a bad flag or key, a value too large) the block is
// skipped too (`swallow`), where it is not (the length itself is malformed), the next line is
// read as a command, as memcached does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "request.h"

namespace gphash::server {

struct ParserLimits {
  uint32_t item_size_max = 1 << 20;  // -I: a store whose item would be larger is refused
  size_t max_line = 2048;            // a line without a newline past this closes the connection
  size_t max_get_line = 1 << 20;     // ... except get/gets lines, which may be this long
};

enum class ParseOutcome { kNeedMore, kRequest, kClose };

struct ParseResult {
  ParseOutcome outcome = ParseOutcome::kNeedMore;
  size_t consumed = 0;   // bytes of the input the request used
  uint64_t swallow = 0;  // bytes that follow and must be discarded (a refused data block)
};

// Parses the first request in `input` into `out` (a fresh Request that will not be moved: its
// keys point into its own buffer).
ParseResult parse_request(std::string_view input, const ParserLimits& limits, Request& out);

// The item footprint the store compares with -I (header + key + value).
constexpr uint64_t item_footprint(size_t key_len, uint64_t value_len) { return 64 + key_len + value_len; }

constexpr size_t kMaxKeyLength = 250;

}  // namespace gphash::server

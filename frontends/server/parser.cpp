#include "parser.h"

#include <array>
#include <cstring>
#include <optional>
#include <vector>

namespace gphash::server {

namespace {

using kv::KvCommand;
using kv::KvOp;
using kv::StoreMode;

constexpr size_t kMaxTokens = 24;          // memcached's MAX_TOKENS: more makes a command invalid
constexpr size_t kMaxOpaque = 32;
constexpr char kBadFormat[] = "CLIENT_ERROR bad command line format\r\n";

// Splits on spaces as memcached does (runs of spaces separate; nothing else does).
struct Tokens {
  std::array<std::string_view, kMaxTokens + 1> tok{};
  size_t n = 0;
  bool overflow = false;  // more than kMaxTokens tokens
};

Tokens tokenize(std::string_view line) {
  constexpr size_t max = kMaxTokens;
  Tokens t;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    if (i == line.size()) break;
    size_t j = i;
    while (j < line.size() && line[j] != ' ') ++j;
    if (t.n == max) {
      t.overflow = true;
      break;
    }
    t.tok[t.n++] = line.substr(i, j - i);
    i = j;
  }
  return t;
}

// strtol/strtoul as memcached's safe_* wrappers use them: optional sign, decimal digits, the
// whole token; out of range fails; a negative number fails for the unsigned kinds.
std::optional<int64_t> parse_signed(std::string_view s, int64_t lo, int64_t hi) {
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (i == s.size()) return std::nullopt;
  uint64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    if (v > (UINT64_MAX - 9) / 10) return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(s[i] - '0');
    if (v > uint64_t{1} << 63) return std::nullopt;
  }
  const int64_t r = neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  if (r < lo || r > hi) return std::nullopt;
  return r;
}

std::optional<uint64_t> parse_unsigned(std::string_view s, uint64_t hi = UINT64_MAX) {
  size_t i = 0;
  if (i < s.size() && s[i] == '+') ++i;
  if (i == s.size()) return std::nullopt;
  uint64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    const uint64_t d = static_cast<uint64_t>(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  if (v > hi) return std::nullopt;
  return v;
}

// An expiry time: memcached reads it as a long and keeps the low 32 bits (so 4000000000 is a
// negative time, already expired).
std::optional<int64_t> parse_exptime(std::string_view s) {
  auto v = parse_signed(s, INT64_MIN, INT64_MAX);
  if (!v) return std::nullopt;
  return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(*v)));
}

bool base64_decode(std::string_view in, std::string& out) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (in.empty() || in.size() % 4 != 0) return false;
  out.clear();
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = in[i + k];
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else if (pad > 0 || (v[k] = value(c)) < 0) {
        return false;
      }
    }
    const uint32_t triple = static_cast<uint32_t>(v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3]);
    out.push_back(static_cast<char>(triple >> 16));
    if (pad < 2) out.push_back(static_cast<char>(triple >> 8 & 0xFF));
    if (pad < 1) out.push_back(static_cast<char>(triple & 0xFF));
  }
  return !out.empty();
}

class Parser {
 public:
  Parser(std::string_view input, const ParserLimits& limits, Request& out) : in_(input), limits_(limits), req_(out) {}

  ParseResult run();

 private:
  ParseResult reply(const char* text, bool suppressible = true) {
    req_.verb = Verb::kReply;
    if (!(suppressible && req_.noreply)) req_.reply = text;
    return done();
  }
  ParseResult done(uint64_t swallow = 0) {
    ParseResult r;
    r.outcome = ParseOutcome::kRequest;
    r.consumed = consumed_;
    r.swallow = swallow;
    return r;
  }
  bool noreply_token(const Tokens& t) const { return t.n > 0 && t.tok[t.n - 1] == "noreply"; }
  // Copies the line (and data) into the request so keys can point into it.
  std::string_view own(std::string_view line) {
    req_.bytes.assign(line.data(), line.size());
    return req_.bytes;
  }

  ParseResult parse_get(std::string_view line, Verb verb);
  ParseResult parse_update(const Tokens& t, Verb verb);
  ParseResult parse_delete(const Tokens& t);
  ParseResult parse_arith(const Tokens& t, bool decrement);
  ParseResult parse_touch(const Tokens& t);
  ParseResult parse_flush_all(const Tokens& t);
  ParseResult parse_meta(const Tokens& t, Verb verb);

  std::string_view in_;
  const ParserLimits& limits_;
  Request& req_;
  size_t consumed_ = 0;
  size_t line_len_ = 0;  // bytes of the command line, newline included
};

ParseResult Parser::run() {
  if (in_.empty()) return {};
  if (static_cast<unsigned char>(in_[0]) == 0x80) return {ParseOutcome::kClose, 0, 0};  // binary protocol: not spoken
  const size_t nl = in_.find('\n');
  if (nl == std::string_view::npos) {
    if (in_.size() <= limits_.max_line) return {};
    // Only a multi-get may be this long (memcached's rule); anything else is not a client.
    size_t i = 0;
    while (i < in_.size() && in_[i] == ' ') ++i;
    const std::string_view rest = in_.substr(i);
    const bool get = rest.starts_with("get ") || rest.starts_with("gets ");
    if (i > 100 || !get || in_.size() > limits_.max_get_line) return {ParseOutcome::kClose, 0, 0};
    return {};
  }
  line_len_ = nl + 1;
  consumed_ = line_len_;
  std::string_view line = in_.substr(0, nl);
  if (line.size() > 1 && line.back() == '\r') line.remove_suffix(1);

  Tokens t = tokenize(line);
  if (t.n == 0) return reply("ERROR\r\n");
  const std::string_view cmd = t.tok[0];
  // get-family lines may hold any number of keys; they are tokenised again without a limit.
  if (cmd == "get") return parse_get(line, Verb::kGet);
  if (cmd == "gets") return parse_get(line, Verb::kGets);
  if (cmd == "gat") return parse_get(line, Verb::kGat);
  if (cmd == "gats") return parse_get(line, Verb::kGats);
  if (t.overflow) return reply("ERROR\r\n");
  if (cmd == "set") return parse_update(t, Verb::kSet);
  if (cmd == "add") return parse_update(t, Verb::kAdd);
  if (cmd == "replace") return parse_update(t, Verb::kReplace);
  if (cmd == "append") return parse_update(t, Verb::kAppend);
  if (cmd == "prepend") return parse_update(t, Verb::kPrepend);
  if (cmd == "cas") return parse_update(t, Verb::kCas);
  if (cmd == "delete") return parse_delete(t);
  if (cmd == "incr") return parse_arith(t, false);
  if (cmd == "decr") return parse_arith(t, true);
  if (cmd == "touch") return parse_touch(t);
  if (cmd == "mg") return parse_meta(t, Verb::kMetaGet);
  if (cmd == "ms") return parse_meta(t, Verb::kMetaSet);
  if (cmd == "md") return parse_meta(t, Verb::kMetaDelete);
  if (cmd == "ma") return parse_meta(t, Verb::kMetaArith);
  if (cmd == "mn") {
    req_.verb = Verb::kMetaNoop;
    return done();
  }
  if (cmd == "version") {
    req_.verb = Verb::kReply;
    req_.reply = "VERSION";  // completed by the server (it knows its version string)
    return done();
  }
  if (cmd == "quit") {
    req_.verb = Verb::kQuit;
    req_.close_after = true;
    return done();
  }
  if (cmd == "verbosity") {
    if (t.n != 2 && t.n != 3) return reply("ERROR\r\n");
    req_.noreply = noreply_token(t);
    return reply("OK\r\n");
  }
  if (cmd == "flush_all") return parse_flush_all(t);
  if (cmd == "stats") {
    req_.verb = Verb::kStats;
    const std::string_view owned = own(line);
    req_.stats_args = t.n > 1 ? owned.substr(static_cast<size_t>(t.tok[1].data() - line.data())) : std::string_view{};
    return done();
  }
  if (cmd == "shutdown") return reply("ERROR: shutdown not enabled\r\n", false);
  return reply("ERROR\r\n");
}

ParseResult Parser::parse_get(std::string_view line, Verb verb) {
  const std::string_view owned = own(line);
  // Any number of keys: split without the token limit of other commands. (The thread's vector,
  // reused: one allocation per get was a measurable part of a small request's CPU time.)
  thread_local std::vector<std::string_view> tok;
  tok.clear();
  for (size_t i = 0; i < owned.size();) {
    while (i < owned.size() && owned[i] == ' ') ++i;
    if (i == owned.size()) break;
    size_t j = i;
    while (j < owned.size() && owned[j] != ' ') ++j;
    tok.push_back(owned.substr(i, j - i));
    i = j;
  }
  const bool touch = verb == Verb::kGat || verb == Verb::kGats;
  const size_t first_key = touch ? 2 : 1;
  if (tok.size() < 2) return reply("ERROR\r\n");
  int64_t exptime = 0;
  if (touch) {
    auto e = parse_exptime(tok[1]);
    if (!e) return reply("CLIENT_ERROR invalid exptime argument\r\n");
    exptime = *e;
    if (tok.size() == 2) return reply("END\r\n");  // memcached: a gat with no key finds nothing
  }
  req_.verb = verb;
  req_.cmds.reserve(tok.size() - first_key);
  for (size_t i = first_key; i < tok.size(); ++i) {
    if (tok[i].size() > kMaxKeyLength) {
      req_.cmds.clear();
      return reply(kBadFormat);
    }
    KvCommand c;
    c.op = KvOp::kGet;
    c.key = tok[i];
    c.set_exptime = touch;
    c.exptime = exptime;
    req_.cmds.push_back(c);
  }
  return done();
}

ParseResult Parser::parse_update(const Tokens& t, Verb verb) {
  const bool cas = verb == Verb::kCas;
  const size_t want = cas ? 6 : 5;
  if (t.n != want && t.n != want + 1) return reply("ERROR\r\n");
  req_.noreply = noreply_token(t);
  const auto vlen = parse_signed(t.tok[4], INT32_MIN, INT32_MAX);
  if (!vlen || *vlen < 0 || *vlen > INT32_MAX - 2) return reply(kBadFormat);  // length unknown: cannot skip
  // From here the data block's length is known: an error still consumes it (never desync).
  const uint64_t block = static_cast<uint64_t>(*vlen) + 2;
  auto refuse = [&](const char* text) {
    req_.verb = Verb::kReply;
    if (!req_.noreply) req_.reply = text;
    const uint64_t available = in_.size() - line_len_;
    consumed_ = line_len_ + std::min<uint64_t>(available, block);
    return done(block - std::min<uint64_t>(available, block));
  };
  if (t.tok[1].size() > kMaxKeyLength) return refuse(kBadFormat);
  const auto flags = parse_unsigned(t.tok[2], UINT32_MAX);
  const auto exptime = parse_exptime(t.tok[3]);
  if (!flags || !exptime) return refuse(kBadFormat);
  std::optional<uint64_t> cas_value;
  if (cas && !(cas_value = parse_unsigned(t.tok[5]))) return refuse(kBadFormat);
  if (item_footprint(t.tok[1].size(), static_cast<uint64_t>(*vlen)) > limits_.item_size_max)
    return refuse("SERVER_ERROR object too large for cache\r\n");

  if (in_.size() < line_len_ + block) return {};
  consumed_ = line_len_ + block;
  const std::string_view data = in_.substr(line_len_, block);
  if (data[block - 2] != '\r' || data[block - 1] != '\n') {
    req_.verb = Verb::kReply;
    if (!req_.noreply) req_.reply = "CLIENT_ERROR bad data chunk\r\n";
    return done();
  }
  // Own the line and the value; the key and value views point into the copy.
  req_.bytes.reserve(line_len_ + block);
  req_.bytes.assign(in_.data(), line_len_ + block);
  const char* base = req_.bytes.data();
  KvCommand c;
  c.op = KvOp::kStore;
  c.key = std::string_view(base + (t.tok[1].data() - in_.data()), t.tok[1].size());
  c.value = std::string_view(base + line_len_, static_cast<size_t>(*vlen));
  c.client_flags = static_cast<uint32_t>(*flags);
  c.exptime = *exptime;
  switch (verb) {
    case Verb::kAdd: c.mode = StoreMode::kAdd; break;
    case Verb::kReplace: c.mode = StoreMode::kReplace; break;
    case Verb::kAppend: c.mode = StoreMode::kAppend; break;
    case Verb::kPrepend: c.mode = StoreMode::kPrepend; break;
    default: c.mode = StoreMode::kSet; break;
  }
  if (cas) {
    c.has_compare_cas = true;
    c.compare_cas = *cas_value;
  }
  req_.verb = verb;
  req_.cmds.push_back(c);
  return done();
}

ParseResult Parser::parse_delete(const Tokens& t) {
  if (t.n < 2 || t.n > 4) return reply("ERROR\r\n");
  if (t.n > 2) {
    const bool hold_zero = t.tok[2] == "0";
    const bool noreply = noreply_token(t);
    const bool valid = (t.n == 3 && (hold_zero || noreply)) || (t.n == 4 && hold_zero && noreply);
    req_.noreply = noreply;
    if (!valid) return reply("CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n");
  }
  if (t.tok[1].size() > kMaxKeyLength) return reply(kBadFormat);
  const std::string_view owned = own(in_.substr(0, line_len_));
  KvCommand c;
  c.op = KvOp::kDelete;
  c.key = owned.substr(static_cast<size_t>(t.tok[1].data() - in_.data()), t.tok[1].size());
  req_.verb = Verb::kDelete;
  req_.cmds.push_back(c);
  return done();
}

ParseResult Parser::parse_arith(const Tokens& t, bool decrement) {
  if (t.n != 3 && t.n != 4) return reply("ERROR\r\n");
  req_.noreply = noreply_token(t);
  if (t.tok[1].size() > kMaxKeyLength) return reply(kBadFormat);
  const auto delta = parse_unsigned(t.tok[2]);
  if (!delta) return reply("CLIENT_ERROR invalid numeric delta argument\r\n");
  const std::string_view owned = own(in_.substr(0, line_len_));
  KvCommand c;
  c.op = KvOp::kArith;
  c.key = owned.substr(static_cast<size_t>(t.tok[1].data() - in_.data()), t.tok[1].size());
  c.delta = *delta;
  c.decrement = decrement;
  req_.verb = decrement ? Verb::kDecr : Verb::kIncr;
  req_.cmds.push_back(c);
  return done();
}

ParseResult Parser::parse_touch(const Tokens& t) {
  if (t.n != 3 && t.n != 4) return reply("ERROR\r\n");
  req_.noreply = noreply_token(t);
  if (t.tok[1].size() > kMaxKeyLength) return reply(kBadFormat);
  const auto exptime = parse_exptime(t.tok[2]);
  if (!exptime) return reply("CLIENT_ERROR invalid exptime argument\r\n");
  const std::string_view owned = own(in_.substr(0, line_len_));
  KvCommand c;
  c.op = KvOp::kTouch;
  c.key = owned.substr(static_cast<size_t>(t.tok[1].data() - in_.data()), t.tok[1].size());
  c.exptime = *exptime;
  req_.verb = Verb::kTouch;
  req_.cmds.push_back(c);
  return done();
}

ParseResult Parser::parse_flush_all(const Tokens& t) {
  if (t.n > 3) return reply("ERROR\r\n");
  req_.noreply = noreply_token(t);
  int64_t delay = 0;
  const size_t args = t.n - (req_.noreply ? 1 : 0);
  if (args == 2) {
    auto d = parse_exptime(t.tok[1]);
    if (!d) return reply("CLIENT_ERROR invalid exptime argument\r\n");
    delay = *d;
  } else if (args > 2) {
    return reply("ERROR\r\n");
  }
  KvCommand c;
  c.op = KvOp::kFlushAll;
  // A negative delay flushes at once, as a zero one (memcached turns it into a time in the past).
  c.flush_delay = delay > 0 ? static_cast<uint32_t>(std::min<int64_t>(delay, 60 * 60 * 24 * 30)) : 0;
  req_.verb = Verb::kFlushAll;
  req_.cmds.push_back(c);
  return done();
}

// Meta commands: <cm> <key> [datalen] <flags>*. Flags are single letters, some with a token.
ParseResult Parser::parse_meta(const Tokens& t, Verb verb) {
  if (t.n < 2) return reply("ERROR\r\n");
  const std::string_view key_token = t.tok[1];
  if (key_token.size() > kMaxKeyLength && verb != Verb::kMetaSet) return reply(kBadFormat);
  size_t first_flag = 2;
  int64_t datalen = -1;
  if (verb == Verb::kMetaSet) {
    if (t.n < 3) return reply(kBadFormat);
    auto d = parse_signed(t.tok[2], 0, INT32_MAX - 2);
    if (!d) return reply(kBadFormat);
    datalen = *d;
    first_flag = 3;
  }
  // Which flags each command takes (letters) and which of them carry a token.
  const char* allowed = "";
  switch (verb) {
    case Verb::kMetaGet: allowed = "bcfhklOqstuvENT"; break;
    case Verb::kMetaSet: allowed = "bcCEFIkMOqsT"; break;
    case Verb::kMetaDelete: allowed = "bCEkOqT"; break;
    case Verb::kMetaArith: allowed = "bcCDEJkMNOqtTv"; break;
    default: break;
  }
  // The flags that come back in the reply, in request order (as memcached 1.6.18 does).
  const char* echoed = verb == Verb::kMetaGet ? "cfhklOst" : verb == Verb::kMetaArith ? "ckOt" : verb == Verb::kMetaSet ? "ckO" : "kO";
  const uint64_t block = datalen >= 0 ? static_cast<uint64_t>(datalen) + 2 : 0;
  auto fail = [&](const char* text) {
    // A refused ms still consumes its data block (its length is known).
    req_.verb = Verb::kReply;
    req_.reply = text;
    if (verb != Verb::kMetaSet) return done();
    const uint64_t available = in_.size() - line_len_;
    consumed_ = line_len_ + std::min<uint64_t>(available, block);
    return done(block - std::min<uint64_t>(available, block));
  };

  if (key_token.size() > kMaxKeyLength) return fail(kBadFormat);
  // memcached's ma and md report every bad token as one error; mg and ms tell them apart.
  const bool terse = verb == Verb::kMetaArith || verb == Verb::kMetaDelete;
  const char* bad_token = terse ? "CLIENT_ERROR invalid or duplicate flag\r\n" : "CLIENT_ERROR bad token in command line format\r\n";
  KvCommand c;
  bool seen[128] = {};
  bool quiet = false, base64 = false;
  for (size_t i = first_flag; i < t.n; ++i) {
    const std::string_view f = t.tok[i];
    const unsigned char letter = static_cast<unsigned char>(f[0]);
    if (letter >= 128 || !std::strchr(allowed, letter) || letter == 0)
      return fail(terse ? "CLIENT_ERROR invalid or duplicate flag\r\n" : "CLIENT_ERROR invalid flag\r\n");
    if (seen[letter]) return fail(terse ? "CLIENT_ERROR invalid or duplicate flag\r\n" : "CLIENT_ERROR duplicate flag\r\n");
    seen[letter] = true;
    const std::string_view token = f.substr(1);
    auto number = [&](int64_t lo, int64_t hi) { return parse_signed(token, lo, hi); };
    switch (letter) {
      case 'q': quiet = true; break;
      case 'b': base64 = true; break;
      case 'v': req_.meta_value = true; break;
      case 'u': c.bump = false; break;
      case 'O':
        if (token.size() > kMaxOpaque) return fail("CLIENT_ERROR opaque token too long\r\n");
        break;
      case 'T': {
        auto e = number(INT32_MIN, INT32_MAX);
        if (!e) return fail(bad_token);
        c.exptime = *e;
        c.set_exptime = true;
        break;
      }
      case 'N': {
        auto e = number(INT32_MIN, INT32_MAX);
        if (!e) return fail(bad_token);
        c.vivify = true;
        c.vivify_exptime = *e;
        break;
      }
      case 'C': case 'E': case 'D': case 'J': {
        auto v = parse_unsigned(token);
        if (!v) return fail(letter == 'E' ? "CLIENT_ERROR invalid flag\r\n" : bad_token);
        if (letter == 'C') {
          c.compare_cas = *v;
          c.has_compare_cas = true;
        } else if (letter == 'E') {
          c.explicit_cas = *v;
        } else if (letter == 'D') {
          c.delta = *v;
        } else {
          c.initial = *v;
        }
        break;
      }
      case 'F': {
        auto v = parse_unsigned(token, UINT32_MAX);
        if (!v) return fail(kBadFormat);
        c.client_flags = static_cast<uint32_t>(*v);
        break;
      }
      case 'M': {
        const char m = token.empty() ? '\0' : token[0];
        if (verb == Verb::kMetaSet) {
          switch (m) {
            case 'E': case 'e': c.mode = StoreMode::kAdd; break;
            case 'A': case 'a': c.mode = StoreMode::kAppend; break;
            case 'P': case 'p': c.mode = StoreMode::kPrepend; break;
            case 'R': case 'r': c.mode = StoreMode::kReplace; break;
            case 'S': case 's': c.mode = StoreMode::kSet; break;
            default: return fail("CLIENT_ERROR invalid mode for ms M token\r\n");
          }
        } else {
          switch (m) {
            case 'I': case 'i': case '+': c.decrement = false; break;
            case 'D': case 'd': case '-': c.decrement = true; break;
            default: return fail("CLIENT_ERROR invalid mode for ma M token\r\n");
          }
        }
        break;
      }
      case 'I':
        // Invalidation (stale items) is not implemented: refuse rather than ignore it.
        return fail("CLIENT_ERROR invalid flag\r\n");
      default: break;  // return-only flags: c f h k l s t
    }
    if (std::strchr(echoed, letter)) req_.meta.push_back({static_cast<char>(letter), letter == 'k' ? std::string_view() : token});
  }
  // Everything is known: take the data block (ms) and own the bytes.
  if (verb == Verb::kMetaSet) {
    if (item_footprint(key_token.size(), static_cast<uint64_t>(datalen)) > limits_.item_size_max) {
      req_.meta.clear();
      return fail("SERVER_ERROR object too large for cache\r\n");
    }
    if (in_.size() < line_len_ + block) return {};  // the caller parses again into a fresh Request
    consumed_ = line_len_ + block;
    if (in_[line_len_ + block - 2] != '\r' || in_[line_len_ + block - 1] != '\n') {
      req_.meta.clear();
      return fail("CLIENT_ERROR bad data chunk\r\n");
    }
  }
  req_.bytes.assign(in_.data(), consumed_);
  auto rebase = [&](std::string_view v) {
    if (v.data() == nullptr) return v;  // k's token before the key is known: nothing to move
    return std::string_view(req_.bytes.data() + (v.data() - in_.data()), v.size());
  };
  for (auto& f : req_.meta) f.token = rebase(f.token);
  std::string_view key = rebase(key_token);
  if (base64) {
    if (!base64_decode(key, req_.decoded_key)) {
      req_.meta.clear();
      return fail("CLIENT_ERROR error decoding key\r\n");
    }
    key = req_.decoded_key;
    for (auto& f : req_.meta)
      if (f.flag == 'k') f.token = rebase(key_token);  // echoed as sent (reply.cpp)
  }
  req_.noreply = quiet;
  c.key = key;
  switch (verb) {
    case Verb::kMetaGet:
      c.op = KvOp::kGet;
      c.want_value = req_.meta_value;
      break;
    case Verb::kMetaSet:
      c.op = KvOp::kStore;
      c.value = std::string_view(req_.bytes.data() + line_len_, static_cast<size_t>(datalen));
      break;
    case Verb::kMetaDelete: c.op = KvOp::kDelete; break;
    case Verb::kMetaArith:
      c.op = KvOp::kArith;
      break;
    default: break;
  }
  req_.verb = verb;
  req_.cmds.push_back(c);
  return done();
}

}  // namespace

ParseResult parse_request(std::string_view input, const ParserLimits& limits, Request& out) {
  return Parser(input, limits, out).run();
}

}  // namespace gphash::server

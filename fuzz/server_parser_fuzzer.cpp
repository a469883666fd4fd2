// libFuzzer target for gphash-server's request path: arbitrary bytes are parsed as a connection
// would parse them (requests one after another, refused data blocks skipped), every request
// that needs the store runs in one round on a real KvStore (cache mode, small memory, a weak
// signature so collisions and chains are exercised), and every reply is built. The sanitizers
// check memory; the asserts check the parser's contract: progress on every request, keys and
// values inside the request's own bytes, no key over 250 bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kv/kv_store.h"
#include "parser.h"
#include "reply.h"

using namespace gphash;

namespace {

kv::Signature weak_signature(std::string_view key) {
  uint64_t h = 0;
  for (char c : key) h = h * 31 + static_cast<unsigned char>(c);
  return {h & 7, 0};
}

kv::KvStore& store() {
  static kv::KvStore* s = [] {
    kv::KvConfig c;
    c.memory_bytes = 4 << 20;
    c.item_size_max = 64 << 10;
    c.signature = weak_signature;
    return new kv::KvStore(c);
  }();
  return *s;
}

void check(bool ok) {
  if (!ok) std::abort();
}

bool inside(std::string_view part, const std::string& whole, const std::string& alt) {
  auto in = [&](const std::string& w) {
    return part.empty() || (part.data() >= w.data() && part.data() + part.size() <= w.data() + w.size());
  };
  return in(whole) || in(alt);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  server::ParserLimits limits;
  limits.item_size_max = 64 << 10;
  limits.max_get_line = 64 << 10;
  std::vector<std::unique_ptr<server::Request>> requests;
  size_t at = 0;
  uint64_t swallow = 0;
  while (at < input.size() && requests.size() < 4096) {
    if (swallow) {
      const uint64_t n = std::min<uint64_t>(swallow, input.size() - at);
      at += n;
      swallow -= n;
      continue;
    }
    auto req = std::make_unique<server::Request>();
    const server::ParseResult r = server::parse_request(input.substr(at), limits, *req);
    if (r.outcome != server::ParseOutcome::kRequest) break;
    check(r.consumed > 0 && r.consumed <= input.size() - at);
    for (const kv::KvCommand& c : req->cmds) {
      check(c.key.size() <= server::kMaxKeyLength);
      check(inside(c.key, req->bytes, req->decoded_key));
      check(inside(c.value, req->bytes, req->decoded_key));
    }
    at += r.consumed;
    swallow = r.swallow;
    requests.push_back(std::move(req));
  }
  std::vector<kv::KvCommand*> round;
  for (auto& r : requests)
    for (auto& c : r->cmds) round.push_back(&c);
  store().execute(round);
  std::string out;
  kv::KvStore* const stores[] = {&store()};
  for (auto& r : requests) {
    if (r->verb == server::Verb::kStats || r->verb == server::Verb::kQuit) continue;
    server::append_reply(out, *r, stores);
    release_items(*r, stores);
  }
  return 0;
}

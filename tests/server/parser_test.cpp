// The request parser: whole requests, incremental input, refused requests that keep the
// connection in step, and the limits that close a connection.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "parser.h"

using namespace gphash::server;
using gphash::kv::KvOp;
using gphash::kv::StoreMode;

namespace {

struct Parsed {
  std::vector<std::unique_ptr<Request>> requests;
  size_t consumed = 0;
  bool closed = false;
};

// Parses as a connection does: as many requests as the input holds, skipping swallowed bytes.
Parsed parse_all(std::string_view input, ParserLimits limits = {}) {
  Parsed p;
  uint64_t swallow = 0;
  while (p.consumed < input.size()) {
    if (swallow) {
      const uint64_t n = std::min<uint64_t>(swallow, input.size() - p.consumed);
      p.consumed += n;
      swallow -= n;
      continue;
    }
    auto req = std::make_unique<Request>();
    const ParseResult r = parse_request(input.substr(p.consumed), limits, *req);
    if (r.outcome == ParseOutcome::kNeedMore) break;
    if (r.outcome == ParseOutcome::kClose) {
      p.closed = true;
      break;
    }
    EXPECT_GT(r.consumed, 0u);
    p.consumed += r.consumed;
    swallow = r.swallow;
    p.requests.push_back(std::move(req));
  }
  return p;
}

// A summary of a request that two parses can be compared by.
std::string describe(const Request& r) {
  std::string s = std::to_string(static_cast<int>(r.verb)) + "|" + r.reply + "|" + (r.noreply ? "q" : "") + "|";
  for (const auto& c : r.cmds)
    s += std::string(c.key) + "=" + std::string(c.value) + "/" + std::to_string(c.client_flags) + "/" + std::to_string(c.exptime) + ";";
  for (const auto& f : r.meta) s += f.flag + std::string(f.token) + ",";
  return s;
}

}  // namespace

TEST(ServerParser, StorageCommand) {
  auto p = parse_all("set key 5 100 3 noreply\r\nabc\r\n");
  ASSERT_EQ(p.requests.size(), 1u);
  const Request& r = *p.requests[0];
  EXPECT_EQ(r.verb, Verb::kSet);
  EXPECT_TRUE(r.noreply);
  ASSERT_EQ(r.cmds.size(), 1u);
  EXPECT_EQ(r.cmds[0].op, KvOp::kStore);
  EXPECT_EQ(r.cmds[0].key, "key");
  EXPECT_EQ(r.cmds[0].value, "abc");
  EXPECT_EQ(r.cmds[0].client_flags, 5u);
  EXPECT_EQ(r.cmds[0].exptime, 100);
  // The key and value live in the request's own bytes, not in the input.
  EXPECT_GE(r.cmds[0].key.data(), r.bytes.data());
  EXPECT_LT(r.cmds[0].value.data(), r.bytes.data() + r.bytes.size());
}

TEST(ServerParser, MultiGetHasNoKeyLimit) {
  std::string line = "get";
  for (int i = 0; i < 500; ++i) line += " k" + std::to_string(i);
  auto p = parse_all(line + "\r\n");
  ASSERT_EQ(p.requests.size(), 1u);
  ASSERT_EQ(p.requests[0]->cmds.size(), 500u);
  EXPECT_EQ(p.requests[0]->cmds[499].key, "k499");
}

TEST(ServerParser, ByteAtATimeEqualsWhole) {
  const std::string input =
      "set a 1 2 3\r\nxyz\r\nget a b c\r\ngets a\r\nincr n 5\r\ndecr n 1 noreply\r\ndelete a\r\ntouch a 10\r\n"
      "gat 5 a b\r\ncas a 0 0 1 99\r\nq\r\nappend a 0 0 2\r\nzz\r\nms k 2 T5 F3 c\r\nhi\r\nmg k v c f t k O77\r\n"
      "md k q\r\nma k MD D3 v\r\nmn\r\nflush_all 10\r\nverbosity 1\r\nversion\r\nbogus\r\nset a b c d\r\n"
      "set a 0 0 x\r\nstats items\r\nquit\r\n";
  const auto whole = parse_all(input);
  ASSERT_EQ(whole.consumed, input.size());
  // Fed as a connection would be fed, one byte more each time.
  std::string buffer;
  std::vector<std::string> incremental;
  for (char ch : input) {
    buffer += ch;
    auto p = parse_all(buffer);
    for (auto& r : p.requests) incremental.push_back(describe(*r));
    buffer.erase(0, p.consumed);
  }
  ASSERT_EQ(incremental.size(), whole.requests.size());
  for (size_t i = 0; i < incremental.size(); ++i) EXPECT_EQ(incremental[i], describe(*whole.requests[i])) << i;
}

TEST(ServerParser, RefusedStoreSkipsItsDataBlock) {
  // Key too long, bad flags: the data block is consumed too, so "get a" is the next request.
  const std::string key(251, 'k');
  auto p = parse_all("set " + key + " 0 0 5\r\nhello\r\nset a xx 0 5\r\nworld\r\nget a\r\n");
  ASSERT_EQ(p.requests.size(), 3u);
  EXPECT_EQ(p.requests[0]->reply, "CLIENT_ERROR bad command line format\r\n");
  EXPECT_EQ(p.requests[1]->reply, "CLIENT_ERROR bad command line format\r\n");
  EXPECT_EQ(p.requests[2]->verb, Verb::kGet);
}

TEST(ServerParser, TooLargeIsSwallowedAsItArrives) {
  ParserLimits limits;
  limits.item_size_max = 1024;
  auto req = std::make_unique<Request>();
  const std::string input = "set big 0 0 5000\r\n" + std::string(100, 'x');
  const ParseResult r = parse_request(input, limits, *req);
  ASSERT_EQ(r.outcome, ParseOutcome::kRequest);
  EXPECT_EQ(req->reply, "SERVER_ERROR object too large for cache\r\n");
  EXPECT_EQ(r.consumed, input.size());
  EXPECT_EQ(r.swallow, 5002u - 100u);
}

TEST(ServerParser, BadDataChunk) {
  auto p = parse_all("set a 0 0 3\r\nabcd\r\n");
  ASSERT_GE(p.requests.size(), 1u);
  EXPECT_EQ(p.requests[0]->reply, "CLIENT_ERROR bad data chunk\r\n");
}

TEST(ServerParser, UnknownLengthIsNotSkipped) {
  // The length itself is malformed: like memcached, the next line is read as a command.
  auto p = parse_all("set a 0 0 -1\r\nget a\r\n");
  ASSERT_EQ(p.requests.size(), 2u);
  EXPECT_EQ(p.requests[1]->verb, Verb::kGet);
}

TEST(ServerParser, ClosesOnBinaryAndOverlongLines) {
  EXPECT_TRUE(parse_all(std::string("\x80\x01\x00\x00", 4)).closed);
  EXPECT_TRUE(parse_all(std::string(3000, 'x')).closed);
  EXPECT_FALSE(parse_all("get " + std::string(3000, 'a')).closed);  // a multi-get may be long
  ParserLimits small;
  small.max_get_line = 4096;
  EXPECT_TRUE(parse_all("get " + std::string(5000, 'a'), small).closed);
}

TEST(ServerParser, MetaFlags) {
  auto p = parse_all("mg foo v c f k O123 q T30\r\n");
  ASSERT_EQ(p.requests.size(), 1u);
  const Request& r = *p.requests[0];
  EXPECT_EQ(r.verb, Verb::kMetaGet);
  EXPECT_TRUE(r.meta_value);
  EXPECT_TRUE(r.noreply);
  ASSERT_EQ(r.cmds.size(), 1u);
  EXPECT_TRUE(r.cmds[0].set_exptime);
  EXPECT_EQ(r.cmds[0].exptime, 30);
  std::string echoed;
  for (auto& f : r.meta) echoed += f.flag;
  EXPECT_EQ(echoed, "cfkO");
  EXPECT_EQ(parse_all("mg foo v v\r\n").requests[0]->reply, "CLIENT_ERROR duplicate flag\r\n");
  EXPECT_EQ(parse_all("mg foo Y\r\n").requests[0]->reply, "CLIENT_ERROR invalid flag\r\n");
  EXPECT_EQ(parse_all("ms foo 2 MX\r\nhi\r\n").requests[0]->reply, "CLIENT_ERROR invalid mode for ms M token\r\n");
  auto b64 = parse_all("mg Zm9v b v\r\n");
  EXPECT_EQ(b64.requests[0]->cmds[0].key, "foo");
}

TEST(ServerParser, MetaSetModes) {
  auto p = parse_all("ms a 1 MA\r\nx\r\nms a 1 ME C5\r\ny\r\n");
  ASSERT_EQ(p.requests.size(), 2u);
  EXPECT_EQ(p.requests[0]->cmds[0].mode, StoreMode::kAppend);
  EXPECT_EQ(p.requests[1]->cmds[0].mode, StoreMode::kAdd);
  EXPECT_TRUE(p.requests[1]->cmds[0].has_compare_cas);
  EXPECT_EQ(p.requests[1]->cmds[0].compare_cas, 5u);
}

// IoBatch (frontends/server/io_batch.h) on real loopback TCP sockets: what the server's io_uring
// loop relies on. Above all that a queued operation never outlives run(): a recv on an empty
// socket or a send into a full one comes back at once with -EAGAIN (or a partial count) instead
// of waiting in the kernel, which would hold the worker (and its buffers) in run().
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "io_batch.h"

namespace {

using gphash::server::IoBatch;

// A connected pair of non-blocking TCP sockets on 127.0.0.1, as a server's connection is.
struct TcpPair {
  int client = -1, server = -1;
  TcpPair() {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    EXPECT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(listener, 1), 0);
    EXPECT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    client = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr);  // EINPROGRESS, then accepted
    server = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK);
    ::close(listener);
    EXPECT_GE(server, 0);
    const int one = 1;
    ::setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~TcpPair() {
    ::close(client);
    ::close(server);
  }
};

std::unique_ptr<IoBatch> make_batch(unsigned entries) {
  try {
    return std::make_unique<IoBatch>(entries);
  } catch (const std::exception&) {
    return nullptr;  // the caller skips, saying why
  }
}

#define MAKE_BATCH_OR_SKIP(var, entries)                                                   \
  auto var = make_batch(entries);                                                          \
  if (!var) GTEST_SKIP() << "no io_uring here (a build without liburing, or a kernel that " \
                            "refuses it): gphash-server makes plain calls";

// run() with a watchdog: a run that waits in the kernel fails the test instead of hanging it
// (`unblock` then ends the wait). run() stays on this thread, which made the ring: a ring set up
// for a single submitter refuses others (EEXIST).
std::vector<int> run_within(IoBatch& batch, std::chrono::milliseconds limit, const std::function<void()>& unblock) {
  std::promise<void> returned;
  std::future<void> ran = returned.get_future();
  bool waited = false;
  std::thread watchdog([&] {
    if (ran.wait_for(limit) != std::future_status::ready) {
      waited = true;
      unblock();
    }
  });
  std::vector<int> results = batch.run();
  returned.set_value();
  watchdog.join();
  EXPECT_FALSE(waited) << "run() waited in the kernel for more than " << limit.count() << " ms";
  return results;
}

TEST(IoBatch, RecvOnAnEmptySocketComesBackAtOnce) {
  MAKE_BATCH_OR_SKIP(batch, 8);
  TcpPair pair;
  char buf[64];
  batch->recv(pair.server, buf, sizeof buf);
  const auto results = run_within(*batch, std::chrono::milliseconds(2000), [&] { ::send(pair.client, "x", 1, 0); });
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0], -EAGAIN);
}

TEST(IoBatch, SendsAndRecvsOfManyConnectionsInOneCallEach) {
  MAKE_BATCH_OR_SKIP(batch, 16);
  std::vector<std::unique_ptr<TcpPair>> pairs;
  std::vector<std::string> messages;
  for (int i = 0; i < 6; ++i) {
    pairs.push_back(std::make_unique<TcpPair>());
    messages.push_back("VALUE k" + std::to_string(i) + " 0 " + std::string(static_cast<size_t>(10 * i + 1), 'v') + "\r\nEND\r\n");
  }
  for (size_t i = 0; i < pairs.size(); ++i) batch->send(pairs[i]->server, messages[i].data(), messages[i].size());
  EXPECT_EQ(batch->queued(), pairs.size());
  auto sent = run_within(*batch, std::chrono::milliseconds(2000), [] {});
  ASSERT_EQ(sent.size(), pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) EXPECT_EQ(sent[i], static_cast<int>(messages[i].size())) << "send " << i;
  EXPECT_EQ(batch->queued(), 0u);

  // Recvs in reverse order: each result lands at its own place in the queue order.
  std::vector<std::vector<char>> bufs(pairs.size(), std::vector<char>(256));
  for (size_t k = 0; k < pairs.size(); ++k) {
    const size_t i = pairs.size() - 1 - k;
    batch->recv(pairs[i]->client, bufs[k].data(), bufs[k].size());
  }
  const auto got = run_within(*batch, std::chrono::milliseconds(2000), [] {});
  ASSERT_EQ(got.size(), pairs.size());
  for (size_t k = 0; k < pairs.size(); ++k) {
    const size_t i = pairs.size() - 1 - k;
    ASSERT_EQ(got[k], static_cast<int>(messages[i].size())) << "recv " << k;
    EXPECT_EQ(std::string(bufs[k].data(), static_cast<size_t>(got[k])), messages[i]);
  }
}

TEST(IoBatch, SendIntoAFullSocketTakesWhatFitsThenComesBackWithEagain) {
  MAKE_BATCH_OR_SKIP(batch, 4);
  TcpPair pair;
  const std::vector<char> big(64 << 20, 'r');  // far more than the socket buffers hold
  batch->send(pair.server, big.data(), big.size());
  auto first = run_within(*batch, std::chrono::milliseconds(5000), [&] { ::shutdown(pair.client, SHUT_RDWR); });
  ASSERT_EQ(first.size(), 1u);
  EXPECT_GT(first[0], 0);
  EXPECT_LT(first[0], static_cast<int>(big.size()));
  batch->send(pair.server, big.data(), big.size());
  auto second = run_within(*batch, std::chrono::milliseconds(5000), [&] { ::shutdown(pair.client, SHUT_RDWR); });
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0], -EAGAIN);
}

TEST(IoBatch, EndOfInputAndAResetPeerAreResultsNotSignals) {
  MAKE_BATCH_OR_SKIP(batch, 4);
  TcpPair closed, reset;
  ::shutdown(closed.client, SHUT_WR);
  // SO_LINGER 0: the close sends a reset, so a send to it fails (EPIPE or ECONNRESET) and, being
  // MSG_NOSIGNAL, raises no SIGPIPE (which would end this test).
  const linger hard{1, 0};
  ::setsockopt(reset.client, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  ::close(reset.client);
  reset.client = ::socket(AF_INET, SOCK_STREAM, 0);  // for the destructor
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  char buf[16];
  const char reply[] = "STORED\r\n";
  batch->recv(closed.server, buf, sizeof buf);
  batch->send(reset.server, reply, sizeof reply - 1);
  batch->send(reset.server, reply, sizeof reply - 1);
  const auto r = run_within(*batch, std::chrono::milliseconds(2000), [] {});
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0], 0) << "end of input";
  // The first send after a reset may still be taken; the second cannot be.
  EXPECT_TRUE(r[2] == -EPIPE || r[2] == -ECONNRESET) << r[2];
}

TEST(IoBatch, HoldsCapacityOperationsAtOnce) {
  MAKE_BATCH_OR_SKIP(batch, 8);
  TcpPair pair;
  char buf[8][8];
  for (int i = 0; i < 8; ++i) {
    EXPECT_FALSE(batch->full());
    batch->recv(pair.server, buf[i], sizeof buf[i]);
  }
  EXPECT_TRUE(batch->full());
  const auto r = run_within(*batch, std::chrono::milliseconds(2000), [&] { ::send(pair.client, "12345678", 8, 0); });
  ASSERT_EQ(r.size(), 8u);
  for (int x : r) EXPECT_EQ(x, -EAGAIN);
  EXPECT_FALSE(batch->full());
}

}  // namespace

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "kv/tick_clock.h"
#include "reply.h"
#include "server.h"

namespace gphash::server {

namespace {

constexpr size_t kReadChunk = 64 * 1024;
constexpr int kMaxEvents = 256;
// --io-uring: each queued recv's buffer. A read that fills it goes on with plain recv calls
// (read_input), so requests of one or a few packets take one batched recv.
constexpr size_t kBatchChunk = 8 * 1024;

using kv::TickClock;

// Connections are epoll data; the listening socket and the wake-up eventfd are told apart by
// these two tags (a Connection* is never this small).
constexpr uintptr_t kListenTag = 1;
constexpr uintptr_t kWakeTag = 2;

}  // namespace

Worker::Worker(ServerContext& ctx, int id) : ctx_(ctx), id_(id), scratch_(kReadChunk), submissions_(ctx.stores.size()) {
  limits_.item_size_max = ctx.options.item_size_max;
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || event_fd_ < 0) throw std::runtime_error(std::string("epoll/eventfd: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, event_fd_, &ev);
  // Every worker waits on the listening socket; EPOLLEXCLUSIVE wakes one of them per connection.
  ev.events = EPOLLIN | EPOLLEXCLUSIVE;
  ev.data.u64 = kListenTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, ctx.listen_fd, &ev);
}

Worker::~Worker() {
  for (auto& c : conns_)
    if (c && !c->dead) ::close(c->fd);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (event_fd_ >= 0) ::close(event_fd_);
}

void Worker::start() { thread_ = std::thread([this] { run(); }); }
void Worker::join() {
  if (thread_.joinable()) thread_.join();
}

void Worker::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(event_fd_, &one, sizeof one);
}

void Worker::complete(std::vector<Connection*>& conns) {
  bool wake_pending;
  {
    std::lock_guard lock(completed_mu_);
    // Non-empty: an earlier completion's wake-up has not been acted on yet, and the worker will
    // take these with those (it empties the list after every wake-up).
    wake_pending = !completed_.empty();
    completed_.insert(completed_.end(), conns.begin(), conns.end());
    has_completed_.store(true, std::memory_order_release);
  }
  if (!wake_pending) wake();
}

void Worker::hand_over(int fd) {
  {
    std::lock_guard lock(completed_mu_);
    handed_over_.push_back(fd);
    has_handed_over_.store(true, std::memory_order_release);
  }
  wake();
}

void Worker::run() {
  if (ctx_.io_uring) {
    // Made on this thread: the ring is set up for one submitting thread.
    io_ = std::make_unique<IoBatch>(kMaxEvents);
    batch_buffers_.resize(kMaxEvents * kBatchChunk);
  }
  epoll_event events[kMaxEvents];
  bool listening = true;
  std::chrono::steady_clock::time_point drain_deadline{};
  for (;;) {
    const int n = epoll_wait(epoll_fd_, events, kMaxEvents, ctx_.stopping ? 20 : -1);
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(event_fd_, &v, sizeof v);
      } else if (tag == kListenTag) {
        if (listening) accept_connections();
      } else {
        on_event(reinterpret_cast<Connection*>(tag), events[i].events);
      }
    }
    if (io_) receive_batch();
    // Connections other workers accepted for this one (each hand-over wakes it).
    if (has_handed_over_.load(std::memory_order_acquire)) {
      std::vector<int> fds;
      {
        std::lock_guard lock(completed_mu_);
        fds.swap(handed_over_);
        has_handed_over_.store(false, std::memory_order_relaxed);
      }
      for (const int fd : fds) adopt(fd);
    }
    // Completions from the scheduler: one entry per request that was in a round. The flag spares
    // the lock in a pass with none (most passes when the worker runs its own rounds): one set
    // after this look is followed by a wake-up (complete() wakes whenever the list was empty), so
    // the next pass takes it.
    if (has_completed_.load(std::memory_order_acquire)) {
      std::lock_guard lock(completed_mu_);
      completed_local_.swap(completed_);
      has_completed_.store(false, std::memory_order_relaxed);
    }
    handle_completions(completed_local_);
    submit_parsed();
    // --io-uring: the replies built in this pass go out together; writing them may parse more
    // input (read while the output was over its limit), whose rounds may answer more.
    while (!to_send_.empty()) {
      send_batch();
      submit_parsed();
    }
    // Only when one was discarded: a walk of every connection per pass otherwise (1,000 of them).
    if (discarded_ > 0) {
      std::erase_if(conns_, [](const std::unique_ptr<Connection>& c) { return c->discarded; });
      discarded_ = 0;
    }

    if (ctx_.stopping) {
      // SIGTERM: stop accepting and reading; answer what was read; then close everything.
      if (listening) {
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, ctx_.listen_fd, nullptr);
        listening = false;
        drain_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        for (auto& c : conns_)
          if (!c->dead) {
            c->closing = true;
            if (c->queue.empty() && c->out.size() == c->out_start) close_connection(c.get());
            else update_interest(c.get());
          }
      }
      bool busy = false;
      for (auto& c : conns_) busy |= c->in_flight > 0 || (!c->dead && c->out.size() > c->out_start);
      if (!busy || std::chrono::steady_clock::now() > drain_deadline) {
        for (auto& c : conns_)
          if (!c->dead) close_connection(c.get());
        std::erase_if(conns_, [](const std::unique_ptr<Connection>& c) { return c->discarded; });
        discarded_ = 0;
        if (!busy) return;
        // Deadline passed with requests still at the scheduler: wait for them (they finish).
        bool in_flight = false;
        for (auto& c : conns_) in_flight |= c->in_flight > 0;
        if (!in_flight) return;
      }
    }
  }
}

// Requests parsed in this pass go to their partitions' schedulers; if that runs their round here,
// the answered connections of this worker come back at once (and answering them may parse more).
void Worker::submit_parsed() {
  for (bool submitted = true; submitted;) {
    submitted = false;
    for (size_t p = 0; p < submissions_.size(); ++p) {
      if (submissions_[p].empty()) continue;
      ctx_.schedulers[p]->submit(submissions_[p], completed_local_);
      handle_completions(completed_local_);
      submitted = true;
    }
  }
}

// One entry per request whose round is done.
void Worker::handle_completions(std::vector<Connection*>& conns) {
  for (Connection* c : conns) {
    --c->in_flight;
    if (c->dead) {
      // The client went away: drop the answered requests, free it when nothing is in flight.
      while (!c->queue.empty() && c->queue.front()->done.load(std::memory_order_acquire)) {
        release_items(*c->queue.front(), ctx_.stores);
        c->queue.pop_front();
      }
      if (c->in_flight == 0) discard(c);
    } else {
      flush(c);
    }
  }
  conns.clear();
}

void Worker::accept_connections() {
  for (;;) {
    const int fd = accept4(ctx_.listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN (another worker took it) or a transient error
    if (ctx_.counters.curr_connections >= ctx_.options.max_connections) {
      // memcached's answer at its connection limit.
      static constexpr char kTooMany[] = "ERROR Too many open connections\r\n";
      [[maybe_unused]] ssize_t w = ::send(fd, kTooMany, sizeof kTooMany - 1, MSG_NOSIGNAL);
      ::close(fd);
      ctx_.counters.rejected_connections++;
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ctx_.counters.curr_connections++;
    ctx_.counters.total_connections++;
    // Round robin over the workers, as memcached's dispatcher does: the worker that accept()
    // happens to wake takes every connection waiting, and a client opening many at once could
    // leave some workers none (seen on 16 cores: 2 of 8 workers idle at 128 connections).
    Worker* target = ctx_.workers[ctx_.accepted.fetch_add(1, std::memory_order_relaxed) % ctx_.workers.size()];
    if (target == this) adopt(fd);
    else target->hand_over(fd);
  }
}

// A new connection of this worker's: read, parsed and answered here from now on.
void Worker::adopt(int fd) {
  auto c = std::make_unique<Connection>();
  c->fd = fd;
  c->id = (static_cast<uint64_t>(id_) << 48) | next_id_++;
  c->authenticated = ctx_.auth.empty();
  c->events = EPOLLIN | EPOLLRDHUP;
  epoll_event ev{};
  ev.events = c->events;
  ev.data.u64 = reinterpret_cast<uintptr_t>(c.get());
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    ::close(fd);
    ctx_.counters.curr_connections--;
    return;
  }
  if (ctx_.verbosity > 0) std::fprintf(stderr, "<%d new connection %llu\n", fd, static_cast<unsigned long long>(c->id));
  conns_.push_back(std::move(c));
}

void Worker::on_event(Connection* c, uint32_t events) {
  if (c->dead) return;
  // Reset or failed: nothing more reaches the client.
  if (events & (EPOLLHUP | EPOLLERR)) {
    close_connection(c);
    return;
  }
  if (events & EPOLLOUT) {
    c->send_blocked = false;
    flush(c);
  }
  if (c->dead) return;
  if (!(events & (EPOLLIN | EPOLLRDHUP))) return;
  if (!io_) {
    read_input(c);
  } else if (!c->read_queued && to_read_.size() < io_->capacity()) {
    c->read_queued = true;
    to_read_.push_back(c);
  } else if (!c->read_queued) {
    read_input(c);  // more ready connections than the batch holds
  }
}

bool Worker::may_read(const Connection* c) const {
  const size_t limit = ctx_.options.conn_buffer_limit;
  return !c->closing && c->queued_bytes < limit && c->out.size() - c->out_start < limit;
}

void Worker::update_interest(Connection* c) {
  if (c->dead) return;
  // Not reading: no EPOLLRDHUP either, which a client that shut down its sending side reports on
  // every epoll_wait (a spin while its replies wait for the socket or a round). Writes and rounds
  // end the pause; a reset comes as EPOLLHUP or EPOLLERR, which epoll always reports.
  uint32_t want = 0;
  if (may_read(c)) want = EPOLLIN | EPOLLRDHUP;
  else WorkerCounters::add(counters_.reads_paused, 1);
  if (c->out.size() > c->out_start) want |= EPOLLOUT;
  if (want == c->events) return;
  c->events = want;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = reinterpret_cast<uintptr_t>(c);
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c->fd, &ev);
}

void Worker::read_input(Connection* c) {
  const uint64_t t0 = TickClock::now();
  bool eof = false, failed = false;
  // Read while there is room; a data block being assembled may need up to the item size more.
  for (int rounds = 0; rounds < 16 && may_read(c); ++rounds) {
    // Into the worker's scratch buffer first: an idle connection then holds no read buffer
    // (1,000 connections would otherwise pin 64 KiB each).
    const ssize_t n = ::recv(c->fd, scratch_.data(), scratch_.size(), 0);
    if (n <= 0) {
      if (n == 0) eof = true;
      else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) failed = true;
      break;
    }
    take_input(c, scratch_.data(), static_cast<size_t>(n));
    if (static_cast<size_t>(n) < scratch_.size()) break;
  }
  WorkerCounters::add(counters_.read_ns, TickClock::ns_since(t0));
  if (failed) {
    close_connection(c);
    return;
  }
  end_of_read(c, eof);
}

// Appends bytes read from the connection and parses what they complete.
void Worker::take_input(Connection* c, const char* data, size_t n) {
  if (c->in_start > 0 && (c->in_start == c->in.size() || c->in_start > c->in.size() / 2)) {
    c->in.erase(0, c->in_start);
    c->in_start = 0;
  }
  c->in.append(data, n);
  WorkerCounters::add(counters_.bytes_read, n);
  parse_input(c);
  if (c->in_start == c->in.size()) {
    c->in.clear();
    c->in_start = 0;
    if (c->in.capacity() > kReadChunk) c->in.shrink_to_fit();
  }
}

// End of input (the client shut down its sending side, or closed): what it sent is answered
// first, as memcached does; closing at once dropped the replies still at a round (all of them
// with a batch period) or not yet taken by the socket. flush closes once nothing is owed.
void Worker::end_of_read(Connection* c, bool eof) {
  if (eof) c->closing = true;
  flush(c);
}

// --io-uring: one recv for every connection epoll found readable in this pass.
void Worker::receive_batch() {
  const uint64_t t0 = TickClock::now();
  batch_conns_.clear();
  for (Connection* c : to_read_) {
    c->read_queued = false;
    if (c->dead) continue;
    if (!may_read(c)) {
      end_of_read(c, false);  // as read_input would: its flush stops the reading (update_interest)
      continue;
    }
    io_->recv(c->fd, batch_buffers_.data() + batch_conns_.size() * kBatchChunk, kBatchChunk);
    batch_conns_.push_back(c);
  }
  to_read_.clear();
  if (batch_conns_.empty()) return;
  const std::vector<int>& results = io_->run();
  WorkerCounters::add(counters_.read_ns, TickClock::ns_since(t0));
  for (size_t i = 0; i < batch_conns_.size(); ++i) {
    Connection* c = batch_conns_[i];
    const int n = results[i];
    if (c->dead) continue;
    if (n > 0) {
      take_input(c, batch_buffers_.data() + i * kBatchChunk, static_cast<size_t>(n));
      if (static_cast<size_t>(n) == kBatchChunk) read_input(c);  // there may be more
      else end_of_read(c, false);
    } else if (n == 0) {
      end_of_read(c, true);
    } else if (n != -EAGAIN && n != -EINTR) {
      close_connection(c);
    }
  }
}

// --io-uring: one send for every connection with replies built in this pass.
void Worker::send_batch() {
  const uint64_t t0 = TickClock::now();
  batch_conns_.clear();
  size_t next = 0;
  for (; next < to_send_.size() && !io_->full(); ++next) {
    Connection* c = to_send_[next];
    c->send_queued = false;
    if (c->dead || c->out.size() == c->out_start) continue;
    io_->send(c->fd, c->out.data() + c->out_start, c->out.size() - c->out_start);
    batch_conns_.push_back(c);
  }
  to_send_.erase(to_send_.begin(), to_send_.begin() + static_cast<std::ptrdiff_t>(next));
  if (batch_conns_.empty()) return;
  const std::vector<int>& results = io_->run();
  WorkerCounters::add(counters_.write_ns, TickClock::ns_since(t0));
  for (size_t i = 0; i < batch_conns_.size(); ++i) {
    Connection* c = batch_conns_[i];
    const int n = results[i];
    if (c->dead) continue;
    if (n > 0) {
      c->out_start += static_cast<size_t>(n);
      WorkerCounters::add(counters_.bytes_written, static_cast<uint64_t>(n));
      c->send_blocked = c->out_start < c->out.size();  // the socket is full: wait for EPOLLOUT
    } else if (n == -EAGAIN || n == -EINTR) {
      c->send_blocked = true;
    } else {
      close_connection(c);
      continue;
    }
    flush(c);  // what a written reply lets happen: close, parse more, build more replies
  }
}

void Worker::parse_input(Connection* c) {
  const uint64_t t0 = TickClock::now();
  while (!c->closing) {
    if (c->swallow > 0) {
      const uint64_t n = std::min<uint64_t>(c->swallow, c->in.size() - c->in_start);
      c->in_start += n;
      c->swallow -= n;
      if (c->swallow > 0) break;
    }
    const std::string_view input(c->in.data() + c->in_start, c->in.size() - c->in_start);
    if (input.empty()) break;
    std::unique_ptr<Request> req = take_request();
    const ParseResult r = parse_request(input, limits_, *req);
    if (r.outcome == ParseOutcome::kNeedMore) break;
    if (r.outcome == ParseOutcome::kClose) {
      // Binary protocol, or a line too long to be a command: memcached closes too.
      c->closing = true;
      c->in_start = c->in.size();
      break;
    }
    c->in_start += r.consumed;
    c->swallow = r.swallow;
    admit(c, std::move(req));
  }
  WorkerCounters::add(counters_.parse_ns, TickClock::ns_since(t0));
}

// Queues a parsed request in order; those that need the store go to the scheduler.
void Worker::admit(Connection* c, std::unique_ptr<Request> req) {
  if (!c->authenticated) {
    // memcached's ASCII authentication: the first command must be a set whose value is
    // "user password"; anything else is refused.
    ctx_.counters.auth_cmds++;
    bool ok = false;
    if (req->verb == Verb::kSet && !req->cmds.empty()) {
      const std::string_view v = req->cmds.front().value;
      const size_t space = v.find(' ');
      if (space != std::string_view::npos)
        for (const auto& [user, pass] : ctx_.auth)
          if (v.substr(0, space) == user && v.substr(space + 1) == pass) ok = true;
      req->reply = ok ? "STORED\r\n" : "CLIENT_ERROR authentication failure\r\n";
      if (!ok) ctx_.counters.auth_errors++;
    } else {
      req->reply = "CLIENT_ERROR unauthenticated\r\n";
    }
    c->authenticated = ok;
    req->verb = Verb::kReply;
    req->cmds.clear();
  }
  if (ctx_.verbosity > 1) {
    std::fprintf(stderr, "<%d %.*s\n", c->fd, static_cast<int>(std::min<size_t>(req->bytes.find('\n'), 200)), req->bytes.c_str());
  }
  if (req->verb == Verb::kQuit) c->closing = true;
  if (req->needs_store()) submit_to_partitions(c, *req);
  c->queued_bytes += req->footprint();
  if (req->needs_store()) {
    ++c->in_flight;
  } else {
    req->done.store(true, std::memory_order_relaxed);
  }
  c->queue.push_back(std::move(req));
}

// Queues a request's commands with the schedulers of their keys' partitions (flush_all: one copy
// of the command for every partition).
void Worker::submit_to_partitions(Connection* c, Request& req) {
  const size_t n = submissions_.size();
  if (n == 1) {
    req.parts_left.store(1, std::memory_order_relaxed);
    submissions_[0].push_back({&req, c, this, static_cast<uint32_t>(req.cmds.size())});
    return;
  }
  if (req.cmds.size() == 1 && req.cmds.front().op != kv::KvOp::kFlushAll) {
    // One key (most requests): one partition, without the per-partition counts below.
    kv::KvCommand& cmd = req.cmds.front();
    cmd.partition = ctx_.partition_of(cmd.key);
    req.parts_left.store(1, std::memory_order_relaxed);
    submissions_[cmd.partition].push_back({&req, c, this, 1});
    return;
  }
  if (req.cmds.front().op == kv::KvOp::kFlushAll) {
    req.cmds.resize(n, req.cmds.front());
    for (size_t p = 0; p < n; ++p) req.cmds[p].partition = static_cast<uint16_t>(p);
  } else {
    for (kv::KvCommand& cmd : req.cmds) cmd.partition = ctx_.partition_of(cmd.key);
  }
  partition_counts_.assign(n, 0);
  for (const kv::KvCommand& cmd : req.cmds) ++partition_counts_[cmd.partition];
  uint16_t parts = 0;
  for (size_t p = 0; p < n; ++p) parts += partition_counts_[p] > 0;
  // Set before any scheduler sees the request: the first one may finish its share at once.
  req.parts_left.store(parts, std::memory_order_relaxed);
  for (size_t p = 0; p < n; ++p)
    if (partition_counts_[p] > 0) submissions_[p].push_back({&req, c, this, partition_counts_[p]});
}

// Builds the replies of the answered requests at the front of the queue (in request order) and
// writes them, while the unsent output stays under the connection's limit.
void Worker::flush(Connection* c) {
  for (;;) {
    if (c->dead) return;
    if (!flush_once(c)) break;
  }
  if (!c->send_queued) update_interest(c);  // else after its send (send_batch)
}

// Returns true when answered requests wait that it did not build replies for (flush again).
bool Worker::flush_once(Connection* c) {
  const size_t limit = ctx_.options.conn_buffer_limit;
  // Nothing answered and nothing to write (read_input's flush after parsing requests that went to
  // a round): no reply or write time to count, and three clock reads a request fewer (~9 ns each
  // on the 2-core VM).
  const bool answered = !c->queue.empty() && c->queue.front()->done.load(std::memory_order_acquire);
  if (answered || c->out.size() > c->out_start) {
    const uint64_t t0 = TickClock::now();
    while (!c->queue.empty() && c->out.size() - c->out_start < limit) {
      Request& req = *c->queue.front();
      if (!req.done.load(std::memory_order_acquire)) break;
      if (req.verb == Verb::kStats) {
        finish_stats(req);
      } else if (req.verb == Verb::kReply && req.reply == "VERSION") {
        req.reply = std::string("VERSION ") + kVersion + "\r\n";
      }
      if (req.verb != Verb::kQuit) append_reply(c->out, req, ctx_.stores);  // the last request (closing)
      c->queued_bytes -= req.footprint();
      recycle(std::move(c->queue.front()));
      c->queue.pop_front();
    }
    const uint64_t t1 = TickClock::now();
    WorkerCounters::add(counters_.reply_ns, TickClock::to_ns(t1 - t0));
    if (io_) {
      if (!c->send_queued && !c->send_blocked && c->out.size() > c->out_start) {
        c->send_queued = true;
        to_send_.push_back(c);
      }
    } else {
      send_now(c);
      if (c->dead) return false;
    }
  }
  if (c->out_start == c->out.size()) {
    c->out.clear();
    c->out_start = 0;
    if (c->out.capacity() > kReadChunk) c->out.shrink_to_fit();  // a large reply's buffer goes back
  } else if (c->out_start > (1 << 20)) {
    c->out.erase(0, c->out_start);
    c->out_start = 0;
  }
  // quit as well: once every reply before it is written, as memcached does (closing at once cut
  // off what the socket had not taken yet).
  if (c->closing && c->queue.empty() && c->out.empty()) {
    close_connection(c);
    return false;
  }
  // Input read while paused may hold complete requests: parse them now that there is room.
  if (may_read(c) && c->in.size() > c->in_start) parse_input(c);
  // Again while an answered request waits and its reply has room: one just parsed, or one the
  // limit left unbuilt above. Nothing else would build the latter once the output is all written:
  // no EPOLLOUT, and no round completes for a request answered at parse time (mn, version, quit).
  return !c->queue.empty() && c->out.size() - c->out_start < limit && c->queue.front()->done.load(std::memory_order_acquire);
}

// Writes the connection's output until the socket takes no more (closes it on an error).
void Worker::send_now(Connection* c) {
  const uint64_t t0 = TickClock::now();
  while (c->out.size() > c->out_start) {
    const ssize_t n = ::send(c->fd, c->out.data() + c->out_start, c->out.size() - c->out_start, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      WorkerCounters::add(counters_.write_ns, TickClock::ns_since(t0));
      close_connection(c);
      return;
    }
    c->out_start += static_cast<size_t>(n);
    WorkerCounters::add(counters_.bytes_written, static_cast<uint64_t>(n));
  }
  WorkerCounters::add(counters_.write_ns, TickClock::ns_since(t0));
}

// Answered requests are kept for the next ones (up to kSpareRequests, with small buffers): a
// request is an allocation, and its line, commands and reply are three more.
std::unique_ptr<Request> Worker::take_request() {
  if (spare_requests_.empty()) return std::make_unique<Request>();
  std::unique_ptr<Request> req = std::move(spare_requests_.back());
  spare_requests_.pop_back();
  req->reset();
  return req;
}

void Worker::recycle(std::unique_ptr<Request> req) {
  constexpr size_t kSpareRequests = 1024, kSmall = 4096;
  if (spare_requests_.size() < kSpareRequests && req->footprint() <= kSmall && req->reply.capacity() <= kSmall)
    spare_requests_.push_back(std::move(req));
}

void Worker::close_connection(Connection* c) {
  if (c->dead) return;
  if (ctx_.verbosity > 0) std::fprintf(stderr, "<%d connection closed\n", c->fd);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  ::close(c->fd);
  c->dead = true;
  ctx_.counters.curr_connections--;
  // Answered requests give back the items they hold; those at the scheduler are dropped when
  // their round comes back (the Connection lives until then).
  if (c->in_flight == 0) discard(c);
}

// Frees a closed connection once no round holds its requests, giving back the items they hold.
// (It is deleted at the end of the event loop's pass, so no caller holds a dangling pointer.)
void Worker::discard(Connection* c) {
  for (auto& r : c->queue) release_items(*r, ctx_.stores);
  c->queue.clear();
  c->discarded = true;
  ++discarded_;
}

void Worker::finish_stats(Request& req) {
  req.verb = Verb::kReply;
  req.reply = render_stats(ctx_, req.stats_args);
}

}  // namespace gphash::server

// gphash-server's threads, Mega-KV's pipeline:
//
//   workers (receivers + senders)          scheduler                     KvStore
//   epoll, read, parse, queue per conn --> rounds: batch-size or period --> search batch,
//   build replies in request order    <--  results, per worker             resolve, write batches
//
// A worker owns its connections: it reads and parses their requests, hands the ones that need
// the store to the scheduler, and when their round is done builds the replies in request order
// and writes them. The scheduler runs one round at a time on the KvStore.
//
// Partitions (--partitions N): N pairs of KvStore and Scheduler, each key's commands going to the
// pair its hash picks (kv::partition_of), so N rounds run at once. One round pipeline serialises
// every command's resolution (about 1 us a command on the 16-core machine: the round, not the
// threads, capped throughput at 0.5-0.76 of memcached's; bench/results/2026-11-29-server-16-cores).
// A request whose keys span partitions (a multi-get, flush_all) is answered when the last of them
// is done (Request::parts_left). Why the workers also
// send: a reply is built on the thread that owns the socket, so no socket changes hands; the
// round only fills in results (docs/PROTOCOL.md, "Design", has the measurement).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "io_batch.h"
#include "kv/kv_store.h"
#include "options.h"
#include "parser.h"
#include "request.h"

namespace gphash::server {

inline constexpr char kVersion[] = "1.6.18-gphash";  // memccapable reads "1.6" from it

class Worker;

struct Connection {
  int fd = -1;
  uint64_t id = 0;
  std::string in;            // bytes read, not yet parsed (from in_start)
  size_t in_start = 0;
  uint64_t swallow = 0;      // bytes of a refused data block still to discard
  std::deque<std::unique_ptr<Request>> queue;  // requests in arrival order, not yet answered
  size_t queued_bytes = 0;
  std::string out;           // reply bytes not yet written (from out_start)
  size_t out_start = 0;
  uint32_t in_flight = 0;    // requests at the scheduler
  uint32_t events = 0;       // the epoll interest set now
  bool closing = false;      // read nothing more; close once the replies are out
  bool dead = false;         // the socket is closed; kept until in_flight is 0
  bool discarded = false;    // dead and nothing in flight: deleted at the end of the loop pass
  bool authenticated = false;
  // --io-uring: waiting in the worker's batch of recvs or sends of this pass; a send the socket
  // did not take whole waits for EPOLLOUT.
  bool read_queued = false, send_queued = false, send_blocked = false;
};

// Counters for `stats` that any worker may change (rarely: connections, authentication).
struct ServerCounters {
  std::atomic<uint64_t> curr_connections{0}, total_connections{0}, rejected_connections{0};
  std::atomic<uint64_t> auth_cmds{0}, auth_errors{0};
};

// Counters one worker keeps for `stats` and the time breakdown, on its own cache line: shared by
// all workers, their read-modify-writes on every request bounced one line between the cores.
// Only the owner writes (add); `stats` sums them over the workers.
struct alignas(64) WorkerCounters {
  std::atomic<uint64_t> bytes_read{0}, bytes_written{0}, conn_yields{0}, reads_paused{0};
  std::atomic<uint64_t> read_ns{0}, parse_ns{0}, reply_ns{0}, write_ns{0};
  static void add(std::atomic<uint64_t>& counter, uint64_t n) { counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
};

struct Submission {
  Request* request;
  Connection* conn;
  Worker* worker;
  uint32_t commands;  // the request's commands in this submission's partition
};

// Mega-KV's scheduler: forms rounds from the requests the receivers queued and runs them on the
// KvStore, one at a time, each round's index changes riding with the next round's searches (with
// the GPU index, pipelined: a round's searches run on the GPU while the round before is resolved,
// KvConfig::pipeline). A round starts when --batch-size commands wait or the oldest has waited
// --batch-period-us. Who runs it: the receiver whose submission makes it due when no round is
// running (no thread handoff on the common path: the dominant cost on a small machine, see
// docs/PROTOCOL.md), otherwise the scheduler thread when the period expires. Requests that arrive
// during a round form the next one, so under load the rounds grow, as Mega-KV's batches do.
class Scheduler {
 public:
  Scheduler(kv::KvStore& store, const Options& options, uint16_t partition);
  ~Scheduler();
  // Queues a receiver's requests (takes the batch's elements). If that makes a round due, the
  // caller runs it; its own connections whose requests completed are appended to `own_done`.
  void submit(std::vector<Submission>& batch, std::vector<Connection*>& own_done);
  void stop();  // finishes every submitted request, then ends the thread

  struct Stats {
    kv::Counter rounds, commands, wait_ns, round_ns, max_round;  // written by whoever runs the round
    kv::Counter by_size, by_period;
    kv::Counter handoffs;  // requests answered in a round their own worker did not run (Worker::complete)
  };
  const Stats& stats() const { return stats_; }
  std::vector<kv::SlabClassStats> slab_snapshot() const;

 private:
  void run();
  bool due() const;
  void drain(std::unique_lock<std::mutex>& lock, Worker* self, std::vector<Connection*>& own_done);
  void execute_round(Worker* self, std::vector<Connection*>& own_done);
  void complete_settled(Worker* self, std::vector<Connection*>& own_done);

  kv::KvStore& store_;
  const uint16_t partition_;  // runs the commands whose KvCommand::partition is this
  const size_t threshold_;
  const std::chrono::microseconds period_;
  const int extra_rounds_;  // --receiver-rounds (drain)
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Submission> queue_;
  size_t queued_commands_ = 0;
  std::chrono::steady_clock::time_point first_arrival_;  // read only with a --batch-period-us
  uint64_t first_arrival_ticks_ = 0;                      // TickClock: the batch wait statistic
  bool running_ = false;  // a round is being run (by a receiver or the scheduler thread)
  bool unfinished_ = false;  // the store has work in hand (KvStore::has_pending), and nobody is running
  bool stopping_ = false;
  // The round being run; only the thread that set running_ touches these.
  std::vector<Submission> round_;
  std::vector<Submission> active_;  // at the store, not yet answered (some command not final)
  std::vector<kv::KvCommand*> cmds_;
  uint64_t runs_ = 0;  // rounds given to the store
  // Per other worker, its connections answered by this round; a few workers, so a linear look
  // (a hash map was a lookup per request and a walk of every worker's entry per round).
  std::vector<std::pair<Worker*, std::vector<Connection*>>> done_;
  // Held while a round (or step) changes the store, so `stats slabs|items` reads it between
  // rounds. (Copying the slab classes out after every round cost 1% of the server's CPU time.)
  mutable std::mutex store_mu_;
  Stats stats_;
  std::thread thread_;
};

struct ServerContext {
  Options options;
  std::vector<kv::KvStore*> stores;      // one per partition
  std::vector<Scheduler*> schedulers;    // stores[p]'s
  uint16_t partition_of(std::string_view key) const { return static_cast<uint16_t>(kv::partition_of(key, static_cast<uint32_t>(stores.size()))); }
  ServerCounters counters;
  std::vector<std::pair<std::string, std::string>> auth;
  std::chrono::system_clock::time_point started = std::chrono::system_clock::now();
  std::atomic<bool> stopping{false};
  std::atomic<int> verbosity{0};
  int listen_fd = -1;
  bool io_uring = false;  // the workers batch their recvs and sends (--io-uring, resolved at start)
  std::vector<Worker*> workers;
  std::atomic<uint64_t> accepted{0};  // new connections go to workers[accepted++ % workers] (as memcached's)
};

class Worker {
 public:
  Worker(ServerContext& ctx, int id);
  ~Worker();
  void start();
  void join();
  void wake();
  // Scheduler thread: these requests' rounds are done.
  void complete(std::vector<Connection*>& conns);
  // Another worker accepted this connection for this one (round robin).
  void hand_over(int fd);
  const WorkerCounters& counters() const { return counters_; }

 private:
  void run();
  void submit_parsed();
  void accept_connections();
  void adopt(int fd);
  void on_event(Connection* c, uint32_t events);
  void read_input(Connection* c);
  void take_input(Connection* c, const char* data, size_t n);
  void end_of_read(Connection* c, bool eof);
  void receive_batch();
  void send_batch();
  void parse_input(Connection* c);
  void admit(Connection* c, std::unique_ptr<Request> req);
  void submit_to_partitions(Connection* c, Request& req);
  void flush(Connection* c);
  bool flush_once(Connection* c);
  void send_now(Connection* c);
  void discard(Connection* c);
  void handle_completions(std::vector<Connection*>& conns);
  void update_interest(Connection* c);
  bool may_read(const Connection* c) const;
  void close_connection(Connection* c);
  void finish_stats(Request& req);
  std::unique_ptr<Request> take_request();
  void recycle(std::unique_ptr<Request> req);

  ServerContext& ctx_;
  WorkerCounters counters_;
  int id_;
  int epoll_fd_ = -1;
  int event_fd_ = -1;
  ParserLimits limits_;
  std::vector<char> scratch_;  // recv buffer
  // --io-uring: one io_uring_enter for the pass's recvs and one for its sends (io_batch.h), a
  // recv buffer per queued recv, and the connections waiting for each.
  std::unique_ptr<IoBatch> io_;
  std::vector<char> batch_buffers_;
  std::vector<Connection*> to_read_, to_send_, batch_conns_;
  std::vector<std::vector<Submission>> submissions_;  // per partition, in arrival order
  std::vector<uint32_t> partition_counts_;            // submit_to_partitions' scratch
  std::vector<std::unique_ptr<Request>> spare_requests_;  // answered, kept for reuse (take_request)
  std::vector<std::unique_ptr<Connection>> conns_;  // owned; index = slot
  size_t discarded_ = 0;  // conns_ to delete at the end of the loop pass
  std::mutex completed_mu_;
  std::vector<Connection*> completed_;
  std::atomic<bool> has_completed_{false};  // completed_ is not empty (set and cleared under completed_mu_)
  std::vector<int> handed_over_;            // accepted by another worker for this one (under completed_mu_)
  std::atomic<bool> has_handed_over_{false};
  std::vector<Connection*> completed_local_;
  uint64_t next_id_ = 0;
  std::thread thread_;
};

// Renders `stats [args]` (general, settings, items, slabs, sizes... as memcached names them).
std::string render_stats(const ServerContext& ctx, std::string_view args);

}  // namespace gphash::server

// Many sockets' recv and send calls in one system call (io_uring), for a worker's loop pass.
//
// Every operation is queued with MSG_DONTWAIT, so the kernel either completes it while run()
// submits it or fails it with -EAGAIN: none is left running after run() returns, and the buffers
// need to live only until then. Readiness still comes from epoll; this only replaces one recv or
// send system call per connection and pass with one io_uring_enter for all of them.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace gphash::server {

class IoBatch {
 public:
  // A ring for `entries` operations at a time. Throws std::runtime_error when the kernel or the
  // build has no io_uring (the message says which).
  explicit IoBatch(unsigned entries);
  ~IoBatch();
  IoBatch(const IoBatch&) = delete;
  IoBatch& operator=(const IoBatch&) = delete;

  unsigned capacity() const { return capacity_; }
  size_t queued() const { return queued_; }
  bool full() const { return queued_ == capacity_; }
  // Queue one operation (at most capacity() between runs); its result is results()[the order queued].
  void recv(int fd, void* buf, size_t len);
  void send(int fd, const void* buf, size_t len);
  // Submits the queued operations and waits for all of them. Each result is what recv(2) or
  // send(2) would return, with -errno for -1.
  const std::vector<int>& run();

 private:
  struct Ring;
  std::unique_ptr<Ring> ring_;
  unsigned capacity_ = 0;
  size_t queued_ = 0;
  std::vector<int> results_;
};

}  // namespace gphash::server

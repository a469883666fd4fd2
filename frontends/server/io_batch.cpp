#include "io_batch.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#ifdef GPHASH_HAVE_LIBURING
#include <liburing.h>
#endif

namespace gphash::server {

#ifdef GPHASH_HAVE_LIBURING

struct IoBatch::Ring {
  io_uring ring{};
};

IoBatch::IoBatch(unsigned entries) : ring_(std::make_unique<Ring>()), capacity_(entries) {
  // One thread submits, and completions need no interrupt of it (it waits for them): the kernel
  // can skip the work those cases cost. Kernels before 6.0 lack the flags; then none.
  io_uring_params params{};
  params.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER;
  int r = io_uring_queue_init_params(entries, &ring_->ring, &params);
  if (r == -EINVAL) {
    params = {};
    r = io_uring_queue_init_params(entries, &ring_->ring, &params);
  }
  if (r < 0) throw std::runtime_error(std::string("io_uring: ") + std::strerror(-r));
  results_.reserve(entries);
}

IoBatch::~IoBatch() { io_uring_queue_exit(&ring_->ring); }

void IoBatch::recv(int fd, void* buf, size_t len) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
  io_uring_prep_recv(sqe, fd, buf, len, MSG_DONTWAIT);
  io_uring_sqe_set_data64(sqe, queued_++);
}

void IoBatch::send(int fd, const void* buf, size_t len) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
  io_uring_prep_send(sqe, fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
  io_uring_sqe_set_data64(sqe, queued_++);
}

const std::vector<int>& IoBatch::run() {
  results_.assign(queued_, -EAGAIN);
  size_t reaped = 0;
  if (queued_ > 0) {
    int r;
    do r = io_uring_submit_and_wait(&ring_->ring, static_cast<unsigned>(queued_));
    while (r == -EINTR);
    if (r < 0) throw std::runtime_error(std::string("io_uring_submit_and_wait: ") + std::strerror(-r));
  }
  while (reaped < queued_) {
    io_uring_cqe* cqe;
    const int r = io_uring_wait_cqe(&ring_->ring, &cqe);
    if (r == -EINTR) continue;
    if (r < 0) throw std::runtime_error(std::string("io_uring_wait_cqe: ") + std::strerror(-r));
    results_[io_uring_cqe_get_data64(cqe)] = cqe->res;
    io_uring_cqe_seen(&ring_->ring, cqe);
    ++reaped;
  }
  queued_ = 0;
  return results_;
}

#else

struct IoBatch::Ring {};
IoBatch::IoBatch(unsigned) { throw std::runtime_error("io_uring: this build has no liburing (install liburing-dev and rebuild)"); }
IoBatch::~IoBatch() = default;
void IoBatch::recv(int, void*, size_t) {}
void IoBatch::send(int, const void*, size_t) {}
const std::vector<int>& IoBatch::run() { return results_; }

#endif

}  // namespace gphash::server

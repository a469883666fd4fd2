#include "child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

extern char** environ;

namespace gphash::crashtest {

const char* crash_child_path() {
#ifdef GPHASH_CRASH_CHILD
  return GPHASH_CRASH_CHILD;
#else
  return "crash_child";
#endif
}

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what + ": " + std::strerror(errno)); }

}  // namespace

ChildProcess::ChildProcess(const std::string& exe, const std::vector<std::string>& args,
                           const std::vector<std::string>& env) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) fail("pipe2");
  fd_ = fds[0];
  int write_end = fds[1];
  if (write_end == 3) {  // dup2(3, 3) would keep FD_CLOEXEC: move it out of the way first
    write_end = fcntl(fds[1], F_DUPFD_CLOEXEC, 10);
    close(fds[1]);
  }
  std::vector<std::string> argv_s{exe};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  // The child must not inherit a crash point meant for another run.
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "GPHASH_CRASH_", 13) != 0) env_s.emplace_back(*e);
  env_s.insert(env_s.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, write_end, 3);
  int rc = posix_spawn(&pid_, exe.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(write_end);
  if (rc != 0) {
    errno = rc;
    fail("cannot start " + exe);
  }
}

ChildProcess::~ChildProcess() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
  }
  if (fd_ >= 0) close(fd_);
}

bool ChildProcess::pump(std::chrono::microseconds timeout) {
  if (fd_ < 0) return false;
  struct pollfd p {
    fd_, POLLIN, 0
  };
  const int ms = static_cast<int>((timeout.count() + 999) / 1000);
  int r = poll(&p, 1, ms);
  if (r < 0 && errno == EINTR) return true;
  if (r < 0) fail("poll");
  if (r == 0) return true;
  char buf[65536];
  ssize_t n = read(fd_, buf, sizeof buf);
  if (n < 0 && errno == EINTR) return true;
  if (n <= 0) {
    parser_.finish();
    close(fd_);
    fd_ = -1;
    return false;
  }
  parser_.feed(buf, static_cast<size_t>(n));
  return true;
}

void ChildProcess::kill_now() {
  if (!reaped_) ::kill(pid_, SIGKILL);
}

int ChildProcess::wait() {
  // Drain first: a child blocked on a full pipe would never exit.
  while (pump(std::chrono::milliseconds(50))) {
  }
  if (!reaped_) {
    while (waitpid(pid_, &status_, 0) < 0)
      if (errno != EINTR) fail("waitpid");
    reaped_ = true;
  }
  return status_;
}

bool ChildProcess::killed_by_sigkill() const { return reaped_ && WIFSIGNALED(status_) && WTERMSIG(status_) == SIGKILL; }
bool ChildProcess::exited_cleanly() const { return reaped_ && WIFEXITED(status_) && WEXITSTATUS(status_) == 0; }

std::string ChildProcess::describe_status() const {
  if (!reaped_) return "running";
  if (WIFEXITED(status_)) return "exited with status " + std::to_string(WEXITSTATUS(status_));
  if (WIFSIGNALED(status_)) return std::string("killed by signal ") + strsignal(WTERMSIG(status_));
  return "ended";
}

void sleep_for_us(int64_t us) {
  if (us <= 0) return;
  struct timespec ts {
    static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000
  };
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void copy_file(const std::string& from, const std::string& to) {
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
}

void remove_pool_and_leftovers(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::remove(path, ec);
  const fs::path p(path);
  const std::string prefix = p.filename().string() + ".creating-";
  for (const auto& e : fs::directory_iterator(p.parent_path(), ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) fs::remove(e.path(), ec);
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

}  // namespace gphash::crashtest

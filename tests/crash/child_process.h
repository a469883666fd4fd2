// Parent side of the crash tests: starts crash_child with a report pipe, reads its report as it
// arrives, kills it, and reaps it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "report_stream.h"

namespace gphash::crashtest {

// The child program; CMake passes its path to the tests.
const char* crash_child_path();

class ChildProcess {
 public:
  // Starts `exe args...` with the report pipe on fd 3 (pass --report-fd 3) and the parent's
  // environment minus GPHASH_CRASH_* plus `env` ("NAME=value").
  ChildProcess(const std::string& exe, const std::vector<std::string>& args, const std::vector<std::string>& env = {});
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Reads what arrives within `timeout` (zero: only what is there). False once the pipe is closed.
  bool pump(std::chrono::microseconds timeout);
  // Pumps until `done(report)` holds, the pipe closes or `deadline` passes; true if `done` held.
  template <class Pred>
  bool pump_until(Pred done, std::chrono::steady_clock::time_point deadline) {
    while (!done(report())) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return false;
      if (!pump(std::chrono::duration_cast<std::chrono::microseconds>(deadline - now))) return done(report());
    }
    return true;
  }
  void kill_now();
  // Waits for the child to end and reads the rest of its report; returns its wait status.
  int wait();
  bool killed_by_sigkill() const;
  bool exited_cleanly() const;  // exit status 0
  const ChildReport& report() const { return parser_.report(); }
  std::string describe_status() const;

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  ReportParser parser_;
};

// Microsecond sleep that does not return early.
void sleep_for_us(int64_t us);

// Copies a pool file (the tests verify a copy, so the crashed original stays for the next child
// to recover) and removes files left by an interrupted create (PATH.creating-*).
void copy_file(const std::string& from, const std::string& to);
void remove_pool_and_leftovers(const std::string& path);
bool file_exists(const std::string& path);

}  // namespace gphash::crashtest

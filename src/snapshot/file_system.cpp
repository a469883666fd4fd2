#include "snapshot/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gphash/error.h"

namespace gphash::snapshot {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  if (err == ENOSPC || err == EDQUOT)
    throw Error(ErrorCode::kNoSpace, fmt::format("{} {}: the file system is full ({})", what, path, std::strerror(err)));
  if (err == ENOENT) throw Error(ErrorCode::kNotFound, fmt::format("{} {}: no such file", what, path));
  throw Error(ErrorCode::kIo, fmt::format("{} {}: {}", what, path, std::strerror(err)));
}

class PosixFile final : public File {
 public:
  PosixFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixFile() override { close(fd_); }

  size_t read_at(uint64_t offset, void* buffer, size_t n) override {
    size_t done = 0;
    while (done < n) {
      const ssize_t got = pread(fd_, static_cast<char*>(buffer) + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail("cannot read", path_, errno);
      if (got == 0) break;
      done += static_cast<size_t>(got);
    }
    return done;
  }
  void write_at(uint64_t offset, const void* data, size_t n) override {
    size_t done = 0;
    while (done < n) {
      const ssize_t put = pwrite(fd_, static_cast<const char*>(data) + done, n - done, static_cast<off_t>(offset + done));
      if (put < 0 && errno == EINTR) continue;
      if (put < 0) fail("cannot write", path_, errno);
      done += static_cast<size_t>(put);
    }
  }
  uint64_t size() override {
    struct stat st {};
    if (fstat(fd_, &st) != 0) fail("cannot stat", path_, errno);
    return static_cast<uint64_t>(st.st_size);
  }
  void truncate(uint64_t size) override {
    if (ftruncate(fd_, static_cast<off_t>(size)) != 0) fail("cannot truncate", path_, errno);
  }
  void sync() override {
    if (fdatasync(fd_) != 0) fail("cannot sync", path_, errno);
  }
  bool try_lock() override {
    if (flock(fd_, LOCK_EX | LOCK_NB) == 0) return true;
    if (errno == EWOULDBLOCK) return false;
    fail("cannot lock", path_, errno);
  }

 private:
  int fd_;
  std::string path_;
};

std::unique_ptr<File> open_regular(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("cannot open", path, errno);
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    throw Error(ErrorCode::kCorruptFile, fmt::format("not a snapshot file: {} is not a regular file", path));
  }
  return std::make_unique<PosixFile>(fd, path);
}

class PosixFileSystem final : public FileSystem {
 public:
  std::unique_ptr<File> open_read(const std::string& path) override { return open_regular(path, O_RDONLY); }
  std::unique_ptr<File> open_write(const std::string& path) override { return open_regular(path, O_RDWR); }
  std::unique_ptr<File> create(const std::string& path, uint32_t mode) override {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      if (errno == EEXIST) throw Error(ErrorCode::kPoolExists, fmt::format("{} exists", path));
      fail("cannot create", path, errno);
    }
    if (fchmod(fd, mode & 07777) != 0) {
      const int err = errno;
      close(fd);
      unlink(path.c_str());
      fail("cannot set the permissions of", path, err);
    }
    return std::make_unique<PosixFile>(fd, path);
  }
  bool exists(const std::string& path) override {
    struct stat st {};
    return stat(path.c_str(), &st) == 0;
  }
  void rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) fail(fmt::format("cannot rename {} to", from), to, errno);
  }
  void remove(const std::string& path) override {
    if (unlink(path.c_str()) != 0 && errno != ENOENT) fail("cannot remove", path, errno);
  }
  void sync_dir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) fail("cannot open directory", dir, errno);
    const int rc = fsync(fd);
    const int err = errno;
    close(fd);
    // Some file systems cannot sync a directory (EINVAL); their renames are synchronous.
    if (rc != 0 && err != EINVAL) fail("cannot sync directory", dir, err);
  }
  std::vector<std::string> list_dir(const std::string& dir) override {
    std::vector<std::string> names;
    DIR* d = opendir(dir.c_str());
    if (!d) return names;
    while (dirent* e = readdir(d)) names.emplace_back(e->d_name);
    closedir(d);
    return names;
  }
  bool process_alive(long pid) override { return kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH; }
};

}  // namespace

FileSystem& posix_file_system() {
  static PosixFileSystem fs;
  return fs;
}

std::string parent_dir(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace gphash::snapshot

// What the snapshot code does to files, behind one seam (LevelDB's Env): every write, sync,
// rename and directory sync of a snapshot goes through a FileSystem, so a test can substitute an
// implementation that fails a call or emulates a power cut, dropping whatever was not synced.
// posix_file_system() is the real one. Calls throw gphash::Error: kNotFound for a missing file,
// kNoSpace for a full file system, kIo for any other failure (the message names the file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gphash::snapshot {

class File {
 public:
  virtual ~File() = default;
  // Reads up to n bytes at offset; returns how many (fewer only at the end of the file).
  virtual size_t read_at(uint64_t offset, void* buffer, size_t n) = 0;
  virtual void write_at(uint64_t offset, const void* data, size_t n) = 0;
  virtual uint64_t size() = 0;
  virtual void truncate(uint64_t size) = 0;
  // Makes the file's data and size durable (fdatasync).
  virtual void sync() = 0;
  // Takes an exclusive advisory lock without waiting; false when another open file holds it.
  virtual bool try_lock() = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  virtual std::unique_ptr<File> open_read(const std::string& path) = 0;
  virtual std::unique_ptr<File> open_write(const std::string& path) = 0;  // an existing file
  // A new file with exactly these permissions (whatever the umask); kPoolExists if the path exists.
  virtual std::unique_ptr<File> create(const std::string& path, uint32_t mode) = 0;
  virtual bool exists(const std::string& path) = 0;
  // Replaces `to` atomically (rename(2)).
  virtual void rename(const std::string& from, const std::string& to) = 0;
  virtual void remove(const std::string& path) = 0;  // no error if it is gone
  // Makes the directory's entries (created, renamed, removed names) durable.
  virtual void sync_dir(const std::string& dir) = 0;
  virtual std::vector<std::string> list_dir(const std::string& dir) = 0;  // names, not paths
  // Whether a process with this id may still run (for removing files a dead snapshot left).
  virtual bool process_alive(long pid) = 0;
};

FileSystem& posix_file_system();

std::string parent_dir(const std::string& path);
std::string base_name(const std::string& path);

}  // namespace gphash::snapshot

// Typed errors of gphash. Expected failures of whole calls (opening a wrong or corrupt pool,
// a bad configuration, an exhausted pool) throw gphash::Error; failures of single operations in
// a batch are reported per operation as an OpStatus instead (see gphash/ops.h).
#pragma once

#include <stdexcept>
#include <string>

namespace gphash {

enum class ErrorCode {
  kNotAPool,            // the file does not start with the gphash magic
  kUnsupportedVersion,  // format major version this build cannot read
  kUnsupportedFeature,  // an incompatible feature bit this build does not know
  kChecksumMismatch,    // both header copies fail their checksum
  kTruncated,           // the file is shorter than the header says
  kCorruptHeader,       // a header field holds an impossible value (field() names it)
  kCorruptTable,        // the table breaks an invariant (found by check or recovery)
  kKeyWidthMismatch,    // the caller's key width differs from the pool's
  kValueWidthMismatch,  // the caller's value width differs from the pool's
  kInvalidArgument,     // a bad configuration or call argument
  kNotFound,            // open: no pool at the path
  kPoolExists,          // create: the path already exists
  kPoolInUse,           // another process holds the pool open
  kNoSpace,             // the pool cannot grow (size limit or file system full)
  kIo,                  // a system call failed
  kNotMappable,         // the GPU cannot map this pool's memory
  kNoGpu,               // a GPU engine was asked for and there is none
  kReadOnly,            // a write to a pool opened read-only
  kCorruptFile,         // a dump or snapshot file is damaged, truncated or not one
  kCuda,                // a CUDA call failed (the message has CUDA's)
  kNeedsRecovery,       // the pool was not shut down cleanly: open it writable once so recovery runs
  kTableFailed,         // an earlier failure left this Table unusable: reopen the pool
  kShardMismatch,       // a sharded table's pools do not form its set (wrong count, foreign or plain pool)
};

const char* to_string(ErrorCode code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message, std::string field = {})
      : std::runtime_error(message), code_(code), field_(std::move(field)) {}
  ErrorCode code() const noexcept { return code_; }
  // The header field or argument the error is about, empty when it is about none.
  const std::string& field() const noexcept { return field_; }

 private:
  ErrorCode code_;
  std::string field_;
};

}  // namespace gphash

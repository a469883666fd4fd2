// Errors of the key-value layer that concern a whole store (open, recovery), not one request.
#pragma once

#include <stdexcept>
#include <string>

namespace gphash::kv {

enum class KvErrorCode { kIo, kNoSpace, kInUse, kCorrupt, kInvalidArgument };

class KvError : public std::runtime_error {
 public:
  KvError(KvErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  KvErrorCode code() const noexcept { return code_; }

 private:
  KvErrorCode code_;
};

}  // namespace gphash::kv

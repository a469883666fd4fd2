// Restoring a pool from a snapshot file: the pool exactly as the chain's last committed segment
// captured it. The whole chain is validated first; the pool is written under a temporary name and
// published only when every page has passed its hash, so a damaged file (kCorruptFile, naming what
// is wrong) changes nothing. The pool comes out "not shut down cleanly", as the capture saw it
// open: its first writable open recounts it (gphash::Table::restore does that and closes it).
#pragma once

#include <string>

#include "gphash/snapshot.h"
#include "snapshot/file_system.h"

namespace gphash::snapshot {

RestoreResult restore_pool(const std::string& snapshot_path, const std::string& pool_spec, const RestoreOptions& options,
                           FileSystem& fs = posix_file_system());

}  // namespace gphash::snapshot

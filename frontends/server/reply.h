// Replies: the bytes a request answers with, once the store has filled in its commands' results.
#pragma once

#include <span>
#include <string>

#include "kv/kv_store.h"
#include "request.h"

namespace gphash::server {

// The server's stores, one per partition; a command's item lives in stores[command.partition].
using Stores = std::span<kv::KvStore* const>;

// Appends the reply of a completed request to `out` and releases the items it held.
void append_reply(std::string& out, Request& req, Stores stores);

// Releases the items a request holds without replying (its connection went away).
void release_items(Request& req, Stores stores);

}  // namespace gphash::server

// Replies: the bytes a request answers with, once the store has filled in its commands' results.
#pragma once

#include <string>

#include "kv/kv_store.h"
#include "request.h"

namespace gphash::server {

// Appends the reply of a completed request to `out` and releases the items it held.
void append_reply(std::string& out, Request& req, const kv::KvStore& store);

// Releases the items a request holds without replying (its connection went away).
void release_items(Request& req, const kv::KvStore& store);

}  // namespace gphash::server

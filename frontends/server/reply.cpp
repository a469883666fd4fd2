#include "reply.h"

#include <fmt/format.h>

#include <charconv>

namespace gphash::server {

namespace {

using kv::KvCommand;
using kv::KvStatus;

constexpr char kOutOfMemory[] = "SERVER_ERROR out of memory storing object\r\n";

// ' ' and the decimal number (to_chars: fmt::format_to through a back_inserter showed in perf).
void append_number(std::string& out, uint64_t v) {
  char buf[21];
  buf[0] = ' ';
  const auto end = std::to_chars(buf + 1, buf + sizeof buf, v).ptr;
  out.append(buf, static_cast<size_t>(end - buf));
}

void append_value_line(std::string& out, const KvCommand& c, bool with_cas) {
  out += "VALUE ";
  out += c.key;
  append_number(out, c.flags);
  append_number(out, c.value_len);
  if (with_cas) append_number(out, c.cas);
  out += "\r\n";
}

void append_data(std::string& out, KvCommand& c, Stores stores) {
  const kv::KvStore& store = *stores[c.partition];
  out += store.value(c.item);
  out += "\r\n";
  store.release(c.item);
  c.item = 0;
}

// The text protocol's answer to a store, delete, arith or touch.
const char* text_status(const Request& req, const KvCommand& c) {
  switch (c.status) {
    case KvStatus::kOk:
      switch (req.verb) {
        case Verb::kDelete: return "DELETED\r\n";
        case Verb::kTouch: return "TOUCHED\r\n";
        case Verb::kFlushAll: return "OK\r\n";
        default: return "STORED\r\n";
      }
    case KvStatus::kNotFound: return "NOT_FOUND\r\n";
    case KvStatus::kNotStored: return "NOT_STORED\r\n";
    case KvStatus::kExists: return "EXISTS\r\n";
    case KvStatus::kNonNumeric: return "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
    case KvStatus::kOutOfMemory: return kOutOfMemory;
    case KvStatus::kTooLarge: return kOutOfMemory;
  }
  return "SERVER_ERROR\r\n";
}

// A key is echoed as it was sent: a base64 key (meta b) in base64, followed by b (memcached's
// META_KEY); MetaFlag::token holds the encoded key then.
void append_key_flag(std::string& out, const MetaFlag& f, const KvCommand& c) {
  out += " k";
  if (f.token.empty()) {
    out += c.key;
  } else {
    out += f.token;
    out += " b";
  }
}

void append_meta_flags(std::string& out, const Request& req, const KvCommand& c) {
  for (const MetaFlag& f : req.meta) {
    if (f.flag == 'k') {
      append_key_flag(out, f, c);
      continue;
    }
    out += ' ';
    out += f.flag;
    switch (f.flag) {
      case 'c': fmt::format_to(std::back_inserter(out), "{}", c.cas); break;
      case 'f': fmt::format_to(std::back_inserter(out), "{}", c.flags); break;
      case 's': fmt::format_to(std::back_inserter(out), "{}", c.value_len); break;
      case 't': fmt::format_to(std::back_inserter(out), "{}", c.ttl); break;
      case 'h': out += c.hit_before ? '1' : '0'; break;
      case 'l': fmt::format_to(std::back_inserter(out), "{}", c.last_access_ago); break;
      case 'O': out += f.token; break;
      default: break;
    }
  }
  if (c.vivified && req.verb == Verb::kMetaGet) out += " W";
  if (c.token_sent && req.verb == Verb::kMetaGet) out += " Z";
  out += "\r\n";
}

void append_meta(std::string& out, Request& req, Stores stores) {
  KvCommand& c = req.cmds.front();
  switch (req.verb) {
    case Verb::kMetaGet:
      if (c.status != KvStatus::kOk && !c.vivified) {
        if (req.noreply) return;
        out += "EN";  // a miss echoes the opaque and the key only, as memcached 1.6 does
        for (const MetaFlag& f : req.meta) {
          if (f.flag == 'k') append_key_flag(out, f, c);
          if (f.flag == 'O') {
            out += " O";
            out += f.token;
          }
        }
        out += "\r\n";
        return;
      }
      if (req.meta_value && c.item) {
        fmt::format_to(std::back_inserter(out), "VA {}", c.value_len);
        append_meta_flags(out, req, c);
        append_data(out, c, stores);
      } else if (req.meta_value) {  // vivified: an empty value
        out += "VA 0";
        append_meta_flags(out, req, c);
        out += "\r\n";
      } else {
        out += "HD";
        append_meta_flags(out, req, c);
      }
      return;
    case Verb::kMetaSet:
      switch (c.status) {
        case KvStatus::kOk:
          if (req.noreply) return;
          out += "HD";
          append_meta_flags(out, req, c);
          return;
        case KvStatus::kNotStored: out += "NS"; break;
        case KvStatus::kExists: out += "EX"; break;
        case KvStatus::kNotFound: out += "NF"; break;
        default: out += kOutOfMemory; return;
      }
      append_meta_flags(out, req, c);
      return;
    case Verb::kMetaDelete:
      switch (c.status) {
        case KvStatus::kOk:
          if (req.noreply) return;
          out += "HD";
          break;
        case KvStatus::kNotFound: out += "NF"; break;  // q hides only HD (memcached)
        default: out += "EX"; break;
      }
      append_meta_flags(out, req, c);
      return;
    case Verb::kMetaArith:
      switch (c.status) {
        case KvStatus::kOk: {
          if (req.noreply) return;  // q hides the value too (memcached)
          if (req.meta_value) {
            const std::string number = std::to_string(c.number);
            fmt::format_to(std::back_inserter(out), "VA {}", number.size());
            append_meta_flags(out, req, c);
            out += number;
            out += "\r\n";
          } else {
            out += "HD";
            append_meta_flags(out, req, c);
          }
          return;
        }
        case KvStatus::kNotFound: out += "NF"; break;
        case KvStatus::kExists: out += "EX"; break;
        case KvStatus::kNonNumeric: out += "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"; return;
        default: out += kOutOfMemory; return;
      }
      append_meta_flags(out, req, c);
      return;
    default: return;
  }
}

}  // namespace

void append_reply(std::string& out, Request& req, Stores stores) {
  switch (req.verb) {
    case Verb::kReply: out += req.reply; return;
    case Verb::kMetaNoop: out += "MN\r\n"; return;
    case Verb::kGet:
    case Verb::kGets:
    case Verb::kGat:
    case Verb::kGats: {
      const bool with_cas = req.verb == Verb::kGets || req.verb == Verb::kGats;
      for (KvCommand& c : req.cmds) {
        if (c.status != KvStatus::kOk || !c.item) continue;
        append_value_line(out, c, with_cas);
        append_data(out, c, stores);
      }
      out += "END\r\n";
      return;
    }
    case Verb::kMetaGet:
    case Verb::kMetaSet:
    case Verb::kMetaDelete:
    case Verb::kMetaArith: append_meta(out, req, stores); return;
    case Verb::kIncr:
    case Verb::kDecr: {
      const KvCommand& c = req.cmds.front();
      if (c.status == KvStatus::kOk) {
        if (!req.noreply) fmt::format_to(std::back_inserter(out), "{}\r\n", c.number);
        return;
      }
      // Running out of memory is reported even under noreply (memcached's out_errstring).
      if (!req.noreply || c.status == KvStatus::kOutOfMemory) out += text_status(req, c);
      return;
    }
    default: {
      const KvCommand& c = req.cmds.front();
      if (!req.noreply || c.status == KvStatus::kOutOfMemory || c.status == KvStatus::kTooLarge) out += text_status(req, c);
      return;
    }
  }
}

void release_items(Request& req, Stores stores) {
  for (KvCommand& c : req.cmds) {
    if (c.item) {
      stores[c.partition]->release(c.item);
      c.item = 0;
    }
  }
}

}  // namespace gphash::server

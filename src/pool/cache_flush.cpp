#include "pool/cache_flush.h"

#include <cpuid.h>
#include <cstdint>

namespace gphash::pool {
namespace {

enum class FlushInstruction { kClwb, kClflushopt, kClflush };

FlushInstruction detect() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    if (b & (1u << 24)) return FlushInstruction::kClwb;
    if (b & (1u << 23)) return FlushInstruction::kClflushopt;
  }
  return FlushInstruction::kClflush;
}

const FlushInstruction kInstruction = detect();

}  // namespace

void flush_lines(const void* p, size_t n) {
  auto line = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  const auto end = reinterpret_cast<uintptr_t>(p) + n;
  for (; line < end; line += 64) {
    auto* addr = reinterpret_cast<char*>(line);
    switch (kInstruction) {
      case FlushInstruction::kClwb: asm volatile("clwb %0" : "+m"(*addr)); break;
      case FlushInstruction::kClflushopt: asm volatile("clflushopt %0" : "+m"(*addr)); break;
      case FlushInstruction::kClflush: asm volatile("clflush %0" : "+m"(*addr)); break;
    }
  }
}

void store_fence() { asm volatile("sfence" ::: "memory"); }

}  // namespace gphash::pool

// Cache-line write-back for pools on persistent memory (PersistMode::kFlush): CLWB where the
// CPU has it, else CLFLUSHOPT, else CLFLUSH.
#pragma once

#include <cstddef>

namespace gphash::pool {

void flush_lines(const void* p, size_t n);
void store_fence();

}  // namespace gphash::pool

# Temporary experiment (not committed): a resize's new level populated beside the rehash
# (EXP_POP=bg: 4 threads populate while all threads rehash) or not at all (EXP_POP=none: the rehash
# faults the pages in). Only safe with a reservation covering the growth (no page can fail).
import sys
root = sys.argv[1]
def edit(p, a, b):
    s = open(p).read()
    assert s.count(a) == 1, (p, a)
    open(p, 'w').write(s.replace(a, b))
edit(root + '/src/engines/common/table_meta.cpp',
     "  h.gphash.level_offset[new_top] = pool_.allocate_extent(h, format::level_bytes(h, new_top));",
     "  h.gphash.level_offset[new_top] = pool_.allocate_extent(h, format::level_bytes(h, new_top), getenv(\"EXP_POP\") ? pool::Pool::Populate::kByCaller : pool::Pool::Populate::kNow);")
edit(root + '/src/engines/cpu/cpu_engine_impl.h',
     """    table_.rehash_bottom(threads_);
""",
     """    std::vector<std::thread> pop;
    if (const char* e = getenv("EXP_POP"); e && std::string(e) == "bg") {
      const uint32_t l = meta_.highest_level();
      std::byte* p = meta_.level(l);
      const uint64_t n = format::level_bytes(meta_.header(), l), step = (n / 4 + 4095) / 4096 * 4096;
      for (int k = 0; k < 4; ++k)
        if (k * step < n) pop.emplace_back([this, p, n, step, k] { pool_.populate(p + k * step, std::min(step, n - k * step)); });
    }
    table_.rehash_bottom(threads_);
    for (std::thread& t : pop) t.join();
""")
edit(root + '/src/engines/cpu/cpu_engine_impl.h', "#include <functional>\n", "#include <functional>\n#include <string>\n#include <thread>\n")
print("patched")

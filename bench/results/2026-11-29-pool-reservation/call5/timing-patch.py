# Temporary timing of the CPU engine's load (not committed): per resize begin / rehash / finish,
# and per batch the growth before it, the rounds and the rest; printed with CPU_PROF=1.
import sys
p = sys.argv[1]
s = open(p).read()
def rep(a, b):
    global s
    assert s.count(a) == 1, a
    s = s.replace(a, b)
rep("""    Exhausted exhausted;
    grow_for(shards.adds(), exhausted);""", """    Exhausted exhausted;
    const auto tg = std::chrono::steady_clock::now();
    grow_for(shards.adds(), exhausted);
    prof_grow_ += seconds_since(tg);
    const auto tr = std::chrono::steady_clock::now();""")
rep("""    int64_t delta = 0;
    for (const Padded& d : deltas) delta += d.value;""", """    prof_rounds_ += seconds_since(tr);
    if (getenv("CPU_PROF") && ++prof_batches_ % 16 == 0)
      fprintf(stderr, "PROF batches %d grow %.3f rounds %.3f | resizes: begin %.3f rehash %.3f finish %.3f | displacements %lu\\n", prof_batches_, prof_grow_, prof_rounds_, rz_begin_, rz_rehash_, rz_finish_, (unsigned long)stats_.displacements);
    int64_t delta = 0;
    for (const Padded& d : deltas) delta += d.value;""")
rep("""    meta_.begin_resize();
    table_.refresh();
    table_.rehash_bottom(threads_);
    meta_.finish_resize();
    table_.refresh();""", """    meta_.begin_resize();
    table_.refresh();
    const auto t1 = std::chrono::steady_clock::now();
    table_.rehash_bottom(threads_);
    const auto t2 = std::chrono::steady_clock::now();
    meta_.finish_resize();
    table_.refresh();
    rz_begin_ += std::chrono::duration<double>(t1 - t0).count();
    rz_rehash_ += std::chrono::duration<double>(t2 - t1).count();
    rz_finish_ += seconds_since(t2);""")
rep("""  EngineStats stats_;
  bool closed_ = false;
};""", """  EngineStats stats_;
  bool closed_ = false;
  double prof_grow_ = 0, prof_rounds_ = 0, rz_begin_ = 0, rz_rehash_ = 0, rz_finish_ = 0;
  int prof_batches_ = 0;
};""")
open(p, 'w').write(s)

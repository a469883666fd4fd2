# Temporary (not committed): the lookup kernel's steps timed by leaving each out (GPHASH_AB_SKIP).
import os, sys, json
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python", "bench"))
import torch
import gphash
import embedding_bench as eb
rows, dim, iters = 4_000_000, 64, 30
dev = torch.device("cuda")
weight = torch.randn(rows, dim, generator=torch.Generator().manual_seed(0))
pool = f"gphash-steps-{os.getpid()}"
st = gphash.EmbeddingStore.create(pool, dim, capacity=rows, engine="gpu", cache_bytes=int(rows * dim * 4 * 0.1), replace=True)
for s in range(0, rows, 1 << 20):
    ids = torch.arange(s, min(s + (1 << 20), rows), dtype=torch.int64)
    st.insert_or_assign(ids, weight[s:s + len(ids)])
draw = eb.zipf_sampler(rows, 1.05, dev, 1)
cache_rows = st.stats()["cache_rows"]
names = {0: "all", 1: "-admit", 2: "-output", 4: "-hostcopy", 8: "-find", 16: "-cacheprobe", 3: "-admit-output",
         12: "-find-hostcopy", 31: "dedup+barriers only"}
for b in (2048, 8192, 32768):
    offsets = torch.arange(0, b, device=dev)
    for i in range(max(60, -(-8 * cache_rows // b))):
        st.lookup(draw(b), offsets, pooling="sum")
    for rnd in (1, 2):
        res = {}
        for skip in (0, 1, 2, 4, 8, 16, 3, 12, 31):
            os.environ["GPHASH_AB_SKIP"] = str(skip)
            fresh = [draw(b) for _ in range(iters)]
            warm = [draw(b) for _ in range(4)]
            g, so, graph = eb.graph_time(lambda x: st.lookup(x, offsets, pooling="sum"), fresh, warm)
            del graph, so
            res[names[skip]] = round(g * 1e6, 1)
        os.environ.pop("GPHASH_AB_SKIP")
        print(b, "round", rnd, json.dumps(res), flush=True)
st.close()
for suffix in ("", ".rows"):
    try: os.unlink(f"/dev/shm/{pool}{suffix}")
    except FileNotFoundError: pass

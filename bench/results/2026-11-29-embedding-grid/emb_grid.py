# Temporary experiment (not committed): the lookup's cooperative grid capped, at small batches.
import os, sys, json
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python", "bench"))
import torch, numpy as np
import gphash
import embedding_bench as eb

rows, dim, alpha, iters = 4_000_000, 64, 1.05, 30
dev = torch.device("cuda")
rng = torch.Generator().manual_seed(0)
weight = torch.randn(rows, dim, generator=rng)
cache_bytes = int(rows * dim * 4 * 0.10)
pool = f"gphash-grid-{os.getpid()}"
st = gphash.EmbeddingStore.create(pool, dim, capacity=rows, engine="gpu", cache_bytes=cache_bytes, replace=True)
for s in range(0, rows, 1 << 20):
    ids = torch.arange(s, min(s + (1 << 20), rows), dtype=torch.int64)
    st.insert_or_assign(ids, weight[s:s + len(ids)])
weight_gpu = weight.to(dev)
draw = eb.zipf_sampler(rows, alpha, dev, 1)
cache_rows = st.stats()["cache_rows"]
out = {}
for b in (2048, 8192, 32768):
    offsets = torch.arange(0, b, device=dev)
    for i in range(max(60, -(-8 * cache_rows // b))):
        st.lookup(draw(b), offsets, pooling="sum")
    ids = [draw(b) for _ in range(iters)]
    tg = eb.time_it(lambda i: torch.nn.functional.embedding_bag(ids[i], weight_gpu, offsets, mode="sum"), iters)
    res = {"torch_gpu_us": round(tg * 1e6, 1)}
    for cap in (0, 1056, 528, 264, 132, 66):
        os.environ["GPHASH_AB_GRID_CAP"] = str(cap)
        t = eb.time_it(lambda i: st.lookup(ids[i], offsets, pooling="sum"), iters)
        want = torch.nn.functional.embedding_bag(ids[0], weight_gpu, offsets, mode="sum")
        ok = bool(torch.allclose(st.lookup(ids[0], offsets, pooling="sum"), want, rtol=1e-4, atol=1e-4))
        # and under a CUDA graph (captured with this cap)
        fresh = [draw(b) for _ in range(iters)]
        warm = [draw(b) for _ in range(4)]
        g, so, graph = eb.graph_time(lambda x: st.lookup(x, offsets, pooling="sum"), fresh, warm)
        del graph, so
        res[f"cap{cap}"] = {"us": round(t * 1e6, 1), "graph_us": round(g * 1e6, 1), "ok": ok}
    os.environ.pop("GPHASH_AB_GRID_CAP")
    out[b] = res
    print(b, json.dumps(res), flush=True)
st.close()
for suffix in ("", ".rows"):
    try: os.unlink(f"/dev/shm/{pool}{suffix}")
    except FileNotFoundError: pass

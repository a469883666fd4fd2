# Temporary (not committed): which kernels a lookup runs and how long each takes (ncu).
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python", "bench"))
import torch
import gphash
import embedding_bench as eb
rows, dim = 1_000_000, 64
dev = torch.device("cuda")
weight = torch.randn(rows, dim, generator=torch.Generator().manual_seed(0))
pool = f"gphash-ncu-{os.getpid()}"
st = gphash.EmbeddingStore.create(pool, dim, capacity=rows, engine="gpu", cache_bytes=int(rows * dim * 4 * 0.1), replace=True)
for s in range(0, rows, 1 << 20):
    ids = torch.arange(s, min(s + (1 << 20), rows), dtype=torch.int64)
    st.insert_or_assign(ids, weight[s:s + len(ids)])
draw = eb.zipf_sampler(rows, 1.05, dev, 1)
for b in (2048, 8192):
    offsets = torch.arange(0, b, device=dev)
    for _ in range(50):
        st.lookup(draw(b), offsets, pooling="sum")
    ids = [draw(b) for _ in range(3)]
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for x in ids:
        st.lookup(x, offsets, pooling="sum")
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
st.close()
for suffix in ("", ".rows"):
    try: os.unlink(f"/dev/shm/{pool}{suffix}")
    except FileNotFoundError: pass
print("done")

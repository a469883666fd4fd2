"""A DLRM-like model for inference with its 26 sparse features in a gphash EmbeddingStore.

    python dlrm_inference.py [--scale 0.05] [--dim 64] [--batches 2048,16384,65536] [--cache-fraction 0.1]

Bottom MLP over 13 dense features, 26 embedding bags (the Criteo Kaggle cardinalities, times
--scale, all in one store with keys table << 40 | id), feature interaction by concatenation, and a
top MLP. IDs are synthetic: per table, Zipf(alpha) over a random permutation. Reports end-to-end
inference throughput (samples/s), with the embeddings in gphash and, for comparison, in
torch.nn.EmbeddingBag modules in GPU memory.
"""
import argparse
import os
import time

import torch

import gphash.torch as gt

CRITEO_KAGGLE = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992,
                 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]


def mlp(sizes):
    layers = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


class DLRM(torch.nn.Module):
    def __init__(self, bags, dim):
        super().__init__()
        self.bottom = mlp([13, 512, 256, dim])
        self.bags = bags  # a callable: (ids [B*26], offsets [B*26]) -> [B*26, dim]
        self.top = mlp([dim * 27, 1024, 1024, 512, 256, 1])

    def forward(self, dense, ids, offsets):
        b = dense.shape[0]
        x = self.bottom(dense)
        e = self.bags(ids, offsets).view(b, 26, -1)
        return torch.sigmoid(self.top(torch.cat([x, e.reshape(b, -1)], 1)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=0.05)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--alpha", type=float, default=1.05)
    ap.add_argument("--batches", default="2048,16384,65536")
    ap.add_argument("--cache-fraction", type=float, default=0.1)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--pool", default=f"gphash-dlrm-{os.getpid()}")
    args = ap.parse_args()
    dev = torch.device("cuda")
    card = [max(1, int(c * args.scale)) for c in CRITEO_KAGGLE]
    total = sum(card)
    row_bytes = args.dim * 4
    t0 = time.time()
    bag = gt.EmbeddingBag(total + 1, args.dim, "sum", pool=args.pool, engine="gpu",
                          cache_bytes=int(total * row_bytes * args.cache_fraction), replace=True)
    weights = []
    for t, c in enumerate(card):
        w = torch.randn(c, args.dim) * 0.01
        weights.append(w)
        for s in range(0, c, 1 << 20):
            ids = torch.arange(s, min(s + (1 << 20), c), dtype=torch.int64)
            bag.store.insert_or_assign((t << 40) | ids, w[s:s + len(ids)])
    print(f"{total} rows in 26 tables (scale {args.scale}), populated in {time.time() - t0:.1f} s")

    # The same tables in GPU memory, as the upper bound.
    gpu_bags = [torch.nn.EmbeddingBag.from_pretrained(w.to(dev), mode="sum") for w in weights]

    def gpu_lookup(ids, offsets):
        b = ids.numel() // 26
        local = (ids & ((1 << 40) - 1)).view(b, 26)
        return torch.stack([gpu_bags[t](local[:, t:t + 1]) for t in range(26)], 1).view(b * 26, -1)

    ours = DLRM(bag, args.dim).to(dev).eval()
    ref = DLRM(gpu_lookup, args.dim).to(dev).eval()
    ref.load_state_dict(ours.state_dict())
    g = torch.Generator(device=dev).manual_seed(0)
    cdfs, perms = [], []
    for c in card:
        p = torch.arange(1, c + 1, dtype=torch.float64, device=dev).pow(-args.alpha).cumsum(0)
        cdfs.append(p / p[-1])
        perms.append(torch.randperm(c, device=dev))

    def sample(b):
        cols = []
        for t in range(26):
            u = torch.rand(b, generator=g, device=dev, dtype=torch.float64)
            k = torch.searchsorted(cdfs[t], u).clamp_(max=card[t] - 1)
            cols.append((t << 40) | perms[t][k])
        return torch.randn(b, 13, device=dev), torch.stack(cols, 1).reshape(-1)

    with torch.inference_mode():
        for b in [int(x) for x in args.batches.split(",")]:
            data = [sample(b) for _ in range(args.iters)]
            offsets = torch.arange(0, b * 26, device=dev)
            torch.testing.assert_close(ours(data[0][0], data[0][1], offsets), ref(data[0][0], data[0][1], offsets),
                                       rtol=1e-4, atol=1e-4)
            for name, model in (("gphash", ours), ("torch-gpu", ref)):
                for d, i in data[:3]:
                    model(d, i, offsets)
                torch.cuda.synchronize()
                t = time.perf_counter()
                for d, i in data:
                    model(d, i, offsets)
                torch.cuda.synchronize()
                secs = (time.perf_counter() - t) / len(data)
                print(f"batch {b:>6}  {name:<9} {b / secs / 1e6:8.3f} M samples/s  ({secs * 1e3:.2f} ms per batch)")
    st = bag.store.stats()
    hr = st["cache_hits"] / max(1, st["cache_hits"] + st["cache_misses"])
    print(f"cache: {st['cache_rows']} rows, hit rate {hr:.3f}; unique ids / ids: {st['unique_ids'] / max(1, st['ids_looked_up']):.3f}")
    bag.store.close()
    for suffix in ("", ".rows"):
        os.unlink(f"/dev/shm/{args.pool}{suffix}")


if __name__ == "__main__":
    main()

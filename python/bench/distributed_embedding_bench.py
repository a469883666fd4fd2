"""Embedding lookups over several GPUs (issue 13): gphash.distributed.ShardedEmbedding with one
rank per GPU (NCCL), for 1 rank and for N, and the speedup. Every rank looks up its own batches of
random IDs (CUDA tensors) in the table sharded over all ranks; throughput is the IDs looked up by
all ranks per second of the slowest rank's timed loop.

    python python/bench/distributed_embedding_bench.py                 # 1 GPU, then every GPU
    python python/bench/distributed_embedding_bench.py --worlds 1,2 --rows 20000000 --dim 64
    python python/bench/distributed_embedding_bench.py --backend gloo --engine cpu --worlds 1,2 \\
        --rows 100000 --iters 5                                         # a smoke test on the CPU

After the timed loop every rank checks each of its batches' rows against the rows inserted.
"""
import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import gphash.distributed as gd


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rows_of(ids, dim):
    """The row inserted for each ID: small integers over 8, exact in float32."""
    return ((ids.to(torch.int64)[:, None] * 7 + torch.arange(dim)) % 1000).to(torch.float32) / 8


def _rank(rank, world, port, a, results):
    dist.init_process_group(a.backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    gpu = a.backend == "nccl"
    if gpu:
        torch.cuda.set_device(rank)
    device = torch.device("cuda", rank) if gpu else torch.device("cpu")
    pool = f"{a.pool}-w{world}"
    table = gd.ShardedEmbedding.create(pool, a.dim, capacity=a.rows, engine=a.engine, cache_bytes=a.cache_bytes,
                                       replace=True)
    chunk = 1 << 20
    per = -(-a.rows // world)
    for c in range(-(-per // chunk)):  # a collective: every rank the same number of times
        start = rank * per + c * chunk
        ids = torch.arange(start, max(start, min(start + chunk, (rank + 1) * per, a.rows)), dtype=torch.int64)
        table.insert_or_assign(ids.to(device), _rows_of(ids, a.dim).to(device))
    g = torch.Generator().manual_seed(rank)
    batches = [torch.randint(0, a.rows, (a.batch,), generator=g).to(device) for _ in range(4)]
    for i in range(a.warmup):
        table.lookup(batches[i % 4])
    if gpu:
        torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(a.iters):
        table.lookup(batches[i % 4])
    if gpu:
        torch.cuda.synchronize()
    seconds = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    # Every row a lookup returned is the row inserted for its ID (a wrong route would show here).
    wrong = torch.tensor([0], dtype=torch.int64, device=device)
    for ids in batches:
        got = table.lookup(ids)
        wrong += (got.cpu() != _rows_of(ids.cpu(), a.dim)).any(dim=1).sum()
    dist.all_reduce(wrong)
    if rank == 0:
        results[world] = a.iters * a.batch * world / seconds.item()
        results[f"wrong{world}"] = int(wrong.item())
    table.close()
    dist.barrier()  # then rank 0 removes the pools of this run
    if rank == 0:
        for r in range(world):
            for suffix in ("", ".rows"):
                path = f"/dev/shm/{gd.ShardedEmbedding.shard_pool(pool, r, world)}{suffix}"
                if os.path.exists(path):
                    os.unlink(path)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worlds", default=None, help="rank counts to run, e.g. 1,2 (default: 1 and every GPU)")
    p.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    p.add_argument("--engine", default="gpu", choices=["gpu", "cpu"])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=1 << 18, help="IDs per lookup per rank")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--cache-bytes", type=int, default=0)
    p.add_argument("--pool", default=f"gphash-dist-bench-{os.getpid()}")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    if a.worlds:
        worlds = [int(w) for w in a.worlds.split(",")]
    else:
        n = torch.cuda.device_count() if a.backend == "nccl" else 2
        worlds = sorted({1, max(1, n)})
    results = mp.Manager().dict()
    for world in worlds:
        mp.spawn(_rank, args=(world, _free_port(), a, results), nprocs=world, join=True)
        print(f"{world} rank(s): {results[world] / 1e6:.2f} M lookups/s "
              f"(x{results[world] / results[worlds[0]]:.2f} of {worlds[0]}); "
              f"wrong rows in {4 * a.batch * world} checked: {results[f'wrong{world}']}", flush=True)
    out = {"backend": a.backend, "engine": a.engine, "rows": a.rows, "dim": a.dim, "batch": a.batch,
           "lookups_per_second": {str(w): results[w] for w in worlds},
           "wrong_rows": {str(w): results[f"wrong{w}"] for w in worlds}}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

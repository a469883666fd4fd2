"""gphash.distributed.ShardedEmbedding across processes: 3 ranks of torch.distributed (gloo, CPU
engine) on one machine, spawned with torch.multiprocessing. Each rank writes rows of its own IDs,
then looks up a mix of every rank's IDs, missing IDs and duplicates (one rank looks up none);
the results must be exactly what one single-process EmbeddingStore holding every row returns."""
import os
import socket

import numpy as np
import pytest

import gphash

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)
import torch.multiprocessing as mp  # noqa: E402

import gphash.distributed as gd  # noqa: E402

WORLD = 3
DIM = 8
IDS_PER_RANK = 2000


def _row(ids):
    """The row written for each ID: a function of the ID, so any process can compute it."""
    ids = torch.as_tensor(ids, dtype=torch.int64)
    return (ids.unsqueeze(1) % 9973).float() * 0.5 + torch.arange(DIM, dtype=torch.float32)


def _queries(rank):
    g = torch.Generator().manual_seed(100 + rank)
    if rank == 2:
        return torch.empty(0, dtype=torch.int64)  # a rank with nothing to look up still takes part
    written = torch.randint(0, WORLD * IDS_PER_RANK, (3000,), generator=g) * 7 + 1
    missing = -torch.randint(10, 10**9, (500,), generator=g)  # never written (and not -1, -2)
    q = torch.cat([written, missing, written[:100]])  # and duplicates
    return q[torch.randperm(len(q), generator=g)]


def _rank_main(rank, port, pool, out_dir):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        table = gd.ShardedEmbedding.create(pool, DIM, capacity=WORLD * IDS_PER_RANK, engine="cpu", replace=True)
        # Rank r writes IDs r*N .. (r+1)*N-1 (scaled), most of them owned by other ranks.
        mine = torch.arange(rank * IDS_PER_RANK, (rank + 1) * IDS_PER_RANK, dtype=torch.int64) * 7 + 1
        table.insert_or_assign(mine, _row(mine))
        total = table.size()
        q = _queries(rank)
        rows = table.lookup(q)
        offsets = torch.tensor([0, 3, 3, 40], dtype=torch.int64) if len(q) else torch.zeros(0, dtype=torch.int64)
        bags = table.lookup(q[:100], offsets, pooling="mean") if len(q) else table.lookup(q, offsets, pooling="mean")
        owners = gd.owner_of(table.store.export()[0] if len(table.store) else torch.empty(0, dtype=torch.int64), WORLD)
        np.savez(os.path.join(out_dir, f"rank{rank}.npz"), queries=q.numpy(), rows=rows.numpy(), bags=bags.numpy(),
                 total=total, local=len(table.store), owners=torch.as_tensor(owners).numpy())
        table.close()
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sharded_lookups_match_one_store(tmp_path):
    pool = str(tmp_path / "emb")  # on a regular file system: the CPU engine works there
    mp.spawn(_rank_main, args=(_free_port(), pool, str(tmp_path)), nprocs=WORLD, join=True)

    every = torch.arange(0, WORLD * IDS_PER_RANK, dtype=torch.int64) * 7 + 1
    one = gphash.EmbeddingStore.create(str(tmp_path / "one"), DIM, capacity=len(every), engine="cpu")
    one.insert_or_assign(every, _row(every))
    locals_ = 0
    for rank in range(WORLD):
        r = np.load(tmp_path / f"rank{rank}.npz")
        assert int(r["total"]) == len(every)
        locals_ += int(r["local"])
        # Each rank's store holds only the IDs it owns, and a fair share of them.
        assert (r["owners"] == rank).all()
        assert len(every) / WORLD * 0.8 < int(r["local"]) < len(every) / WORLD * 1.2
        q = torch.from_numpy(r["queries"])
        assert len(q) == len(_queries(rank))
        if len(q) == 0:
            assert r["rows"].shape == (0, DIM)
            continue
        expected = one.lookup(q, pooling=None)
        np.testing.assert_array_equal(r["rows"], expected.numpy())
        expected_bags = one.lookup(q[:100], torch.tensor([0, 3, 3, 40]), pooling="mean")
        np.testing.assert_allclose(r["bags"], expected_bags.numpy(), rtol=1e-6)
    assert locals_ == len(every)
    one.close()


def test_owner_is_fixed():
    # Routing must not change between releases: stores written by one are read by the next.
    ids = torch.tensor([0, 1, 2, 3, -5, 2**62], dtype=torch.int64)
    assert gd.owner_of(ids, 4).tolist() == [0, 1, 3, 0, 1, 0]
    # And it is SplitMix64's finalizer on unsigned 64-bit words, as documented.
    assert gd.owner_of(ids, 4).tolist() == [_reference_owner(int(i), 4) for i in ids]
    spread = torch.bincount(gd.owner_of(torch.arange(100000), 3), minlength=3)
    assert spread.min() > 31000


def _reference_owner(i, world):
    z = i & (2**64 - 1)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
    z ^= z >> 31
    return ((z >> 32) * world) >> 32


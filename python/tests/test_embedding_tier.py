"""gphash.EmbeddingStore with a tier below host memory (issue 9, item 5): every row in a file read
with io_uring, copies of host_rows of them in host memory. Lookups against a plain gather, writes,
copies made by lookups, reopen, killed processes, old row files, typed errors; the GPU lookup of
such a store (CUDA tensors) where torch sees a GPU and gphash was built with CUDA."""
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import gphash
from test_embedding import DTYPES, POOLINGS, bags, from_f32, reference, run_until_killed, to_f32, tol


def assign_and_erase(store, table, assign, erase, rng, dtype="float32"):
    """Writes new rows to `assign` and erases `erase`, in the store and in the reference dict."""
    rows = from_f32(rng.standard_normal((len(assign), store.dim)).astype(np.float32), dtype)
    store.insert_or_assign(assign, rows)
    for i, r in zip(assign, to_f32(rows, dtype)):
        table[int(i)] = r
    assert store.erase(erase) == len(erase)
    for i in erase:
        del table[int(i)]


def make_tiered(pool_name, tier, dim, dtype, n, host_rows, seed=0, **kw):
    store = gphash.EmbeddingStore.create(pool_name, dim, dtype=dtype, capacity=2 * n, replace=True,
                                         host_rows=host_rows, tier_path=tier, **kw)
    rng = np.random.default_rng(seed)
    ids = rng.choice(10**12, size=n, replace=False).astype(np.int64)
    stored = from_f32(rng.standard_normal((n, dim)).astype(np.float32), dtype)
    store.insert_or_assign(ids, stored)
    table = {int(i): to_f32(stored[k:k + 1], dtype)[0] for k, i in enumerate(ids)}
    return store, ids, table


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("dim", [3, 64, 300])
def test_tiered_lookup_matches_a_plain_gather(pool_name, tmp_path, dtype, pooling, dim):
    # 300 rows, copies of 60 in host memory: most lookups read the tier.
    store, ids, table = make_tiered(pool_name, tmp_path / "tier", dim, dtype, 300, host_rows=60)
    rng = np.random.default_rng(dim)
    q, offsets = bags(rng, ids, 40, 12, missing=-5)
    if pooling is None:
        offsets = None
    out = store.lookup(q, offsets, pooling=pooling)
    np.testing.assert_allclose(to_f32(out, dtype), reference(table, q, offsets, pooling, dim), rtol=tol(dtype), atol=tol(dtype))
    s = store.stats()
    assert s["host_rows"] == 60 and s["capacity"] == 600
    tier_ids = {int(i) for i in ids[60:]}  # inserted in order: the first 60 got the copies
    assert 0 < s["tier_reads"] <= len({int(i) for i in q} & tier_ids)
    store.close()


def test_tiered_store_reopens_reuses_rows_and_exports(pool_name, tmp_path):
    tier = tmp_path / "tier"
    store, ids, table = make_tiered(pool_name, tier, 16, "float32", 200, host_rows=50)
    rng = np.random.default_rng(7)
    # Reassign rows with and without copies (out of place: the old rows become free), erase some.
    assign_and_erase(store, table, np.concatenate([ids[:10], ids[150:170]]), ids[100:120], rng)
    store.close()

    store = gphash.EmbeddingStore.open(pool_name)
    s = store.stats()
    assert s["host_rows"] == 50 and s["rows_used"] == len(table) and len(store) == len(table)
    out, found = store.lookup(ids, pooling=None, found=True)
    np.testing.assert_array_equal(found, [int(i) in table for i in ids])
    np.testing.assert_allclose(out, reference(table, ids, None, None, 16))
    # Freed rows are used again, host memory's first: the store never outgrows its capacity.
    more = np.arange(1, 221, dtype=np.int64)  # 200 - 20 + 220 = 400 = capacity
    store.insert_or_assign(more, np.tile(more[:, None].astype(np.float32), (1, 16)))
    with pytest.raises(gphash.Error) as e:
        store.insert_or_assign(np.array([10**13], np.int64), np.zeros((1, 16), np.float32))
    assert e.value.code == "NoSpace"
    got_ids, got_rows = store.export()
    assert len(got_ids) == len(store) == 400
    for i in more:
        table[int(i)] = np.full(16, float(i), np.float32)
    np.testing.assert_allclose(got_rows, reference(table, got_ids, None, None, 16))
    store.close()
    assert gphash.check_pool(pool_name)["ok"]


def test_tiered_store_survives_a_killed_process(pool_name, tmp_path):
    tier = str(tmp_path / "tier")
    run_until_killed(f"""
        import os, signal, numpy as np, gphash
        s = gphash.EmbeddingStore.create({pool_name!r}, 8, capacity=4000, replace=True, host_rows=500, tier_path={tier!r})
        ids = np.arange(1, 2001, dtype=np.int64)
        rows = (ids[:, None] * np.ones((1, 8))).astype(np.float32)
        s.insert_or_assign(ids, rows)
        s.insert_or_assign(ids[400:700], -rows[400:700])  # rows on both sides of host_rows
        s.erase(ids[-10:])
        print("acknowledged", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    store = gphash.EmbeddingStore.open(pool_name)
    ids = np.arange(1, 2001, dtype=np.int64)
    want = (ids[:, None] * np.ones((1, 8))).astype(np.float32)
    want[400:700] *= -1
    want[-10:] = 0
    out, found = store.lookup(ids, pooling=None, found=True)
    assert found.sum() == 1990
    np.testing.assert_array_equal(out, want)
    assert store.stats()["rows_used"] == 1990
    store.close()
    assert gphash.check_pool(pool_name)["ok"]


def test_a_version_1_row_file_opens_with_every_row_in_host_memory(pool_name):
    """Row files written before the tier (version 1: no tier fields) open unchanged."""
    store = gphash.EmbeddingStore.create(pool_name, 4, capacity=100, replace=True)
    ids = np.arange(1, 51, dtype=np.int64)
    store.insert_or_assign(ids, np.tile(ids[:, None].astype(np.float32), (1, 4)))
    store.close()
    path = f"/dev/shm/{pool_name}.rows"
    with open(path, "r+b") as f:
        header = bytearray(f.read(584))
        header[8:12] = struct.pack("<I", 1)  # version 1
        header[56:584] = bytes(528)          # no tier fields
        x = 1469598103934665603
        for b in header[:40]:  # FNV-1a of the fields before the checksum
            x = ((x ^ b) * 1099511628211) % 2**64
        header[40:48] = struct.pack("<Q", x)
        f.seek(0)
        f.write(header)
    store = gphash.EmbeddingStore.open(pool_name)
    assert store.stats()["host_rows"] == 100
    np.testing.assert_array_equal(store.lookup(ids, pooling=None), np.tile(ids[:, None].astype(np.float32), (1, 4)))
    store.insert_or_assign(np.array([99], np.int64), np.ones((1, 4), np.float32))
    store.close()


def test_tier_errors_are_typed(pool_name, tmp_path):
    tier = str(tmp_path / "tier")
    cases = [
        (dict(host_rows=200), "InvalidArgument", "host_rows"),      # more than capacity
        (dict(host_rows=50), "InvalidArgument", "tier_path"),       # rows beyond host memory, no file
        (dict(tier_path=tier), "InvalidArgument", "tier_path"),     # a file and every row in host memory
    ]
    for kw, code, field in cases:
        with pytest.raises(gphash.Error) as e:
            gphash.EmbeddingStore.create(pool_name, 4, capacity=100, replace=True, **kw)
        assert (e.value.code, e.value.field) == (code, field), (kw, str(e.value))

    def damaged(damage):
        store = gphash.EmbeddingStore.create(pool_name, 4, capacity=100, replace=True, host_rows=10, tier_path=tier)
        store.insert_or_assign(np.arange(1, 31, dtype=np.int64), np.ones((30, 4), np.float32))
        store.close()
        if damage == "missing":
            os.unlink(tier)
        elif damage == "truncated":
            os.truncate(tier, 512 * 10)
        else:
            with open(f"/dev/shm/{pool_name}.rows", "r+b") as f:
                f.seek(64)  # the tier path
                f.write(b"X")
        with pytest.raises(gphash.Error) as e:
            gphash.EmbeddingStore.open(pool_name)
        return e.value.code, e.value.field

    assert damaged("missing") == ("NotFound", "tier_path")
    assert damaged("truncated") == ("Truncated", "tier_path")
    assert damaged("header") == ("ChecksumMismatch", "tier_checksum")


def test_hot_rows_get_a_copy_in_host_memory(pool_name, tmp_path):
    """Rows that lookups read from the tier again and again get copies in host memory, in place
    of copies nobody reads: the same lookups then read the tier less, every row stays right,
    and so after reopening."""
    store, ids, table = make_tiered(pool_name, tmp_path / "tier", 8, "float32", 2000, host_rows=200)
    rng = np.random.default_rng(3)
    hot = rng.choice(ids[200:], 150, replace=False)  # without copies at first
    q = np.concatenate([hot, rng.choice(ids, 50)])
    reads = []
    for _ in range(4):
        before = store.stats()["tier_reads"]
        np.testing.assert_array_equal(store.lookup(q, pooling=None), reference(table, q, None, None, 8))
        reads.append(store.stats()["tier_reads"] - before)
    s = store.stats()
    assert s["tier_promotions"] >= 150, s
    assert reads[0] >= 150 and reads[-1] <= 50, reads
    store.close()
    store = gphash.EmbeddingStore.open(pool_name)
    before = store.stats()["tier_reads"]
    store.lookup(hot, pooling=None)
    assert store.stats()["tier_reads"] == before  # the copies are still in host memory
    out, found = store.lookup(ids, pooling=None, found=True)
    assert found.all()
    np.testing.assert_array_equal(out, reference(table, ids, None, None, 8))
    # Writes to IDs with copies, and erases, keep the copies right.
    assign_and_erase(store, table, np.concatenate([hot[:20], ids[:20]]), hot[20:30], rng)
    np.testing.assert_array_equal(store.lookup(ids, pooling=None), reference(table, ids, None, None, 8))
    store.close()
    store = gphash.EmbeddingStore.open(pool_name)
    assert store.stats()["rows_used"] == len(table)
    np.testing.assert_array_equal(store.lookup(ids, pooling=None), reference(table, ids, None, None, 8))
    store.close()
    assert gphash.check_pool(pool_name)["ok"]


def test_tier_promotion_can_be_turned_off(pool_name, tmp_path):
    store = gphash.EmbeddingStore.create(pool_name, 4, capacity=400, replace=True, host_rows=100,
                                         tier_path=tmp_path / "tier", tier_promotion=False)
    ids = np.arange(1, 301, dtype=np.int64)
    store.insert_or_assign(ids, np.tile(ids[:, None].astype(np.float32), (1, 4)))
    for _ in range(3):
        store.lookup(ids[150:], pooling=None)
    s = store.stats()
    assert s["tier_promotions"] == 0 and s["tier_reads"] == 3 * 150
    store.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_copies_moving_survive_a_kill(pool_name, tmp_path, seed):
    """A process looks up skewed IDs in a loop (copies made and dropped all the time) and is
    killed at a random moment; every ID reopens with its own bytes."""
    tier = str(tmp_path / "tier")
    child = textwrap.dedent(f"""
        import numpy as np, gphash
        s = gphash.EmbeddingStore.create({pool_name!r}, 8, capacity=2000, replace=True, host_rows=300, tier_path={tier!r})
        ids = np.arange(1, 2001, dtype=np.int64)
        s.insert_or_assign(ids, (ids[:, None] * np.ones((1, 8))).astype(np.float32))
        print("ready", flush=True)
        rng = np.random.default_rng({seed})
        for it in range(10**9):  # a hot set that drifts, so that copies keep changing
            ranks = np.minimum(rng.zipf(1.2, 512), 2000)
            s.lookup(ids[(2000 - ranks + 37 * it) % 2000], pooling=None)
            print(s.stats()["tier_promotions"], flush=True)
    """)
    p = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True, env=os.environ)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.3 + 0.4 * np.random.default_rng(seed).random())
    p.send_signal(signal.SIGKILL)
    promotions = [int(line) for line in p.stdout.read().split()]
    p.wait()
    assert promotions and promotions[-1] > 300, promotions[-3:]  # copies were made, and dropped
    store = gphash.EmbeddingStore.open(pool_name)
    ids = np.arange(1, 2001, dtype=np.int64)
    out, found = store.lookup(ids, pooling=None, found=True)
    assert found.all()
    np.testing.assert_array_equal(out, (ids[:, None] * np.ones((1, 8))).astype(np.float32))
    assert store.stats()["rows_used"] == 2000
    store.close()
    assert gphash.check_pool(pool_name)["ok"]


def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not (gphash.has_cuda and torch.cuda.is_available()):
        pytest.skip("needs a GPU and a CUDA build of gphash")
    return torch


def _gpu_lookup(torch, store, q, offsets, pooling):
    out = store.lookup(torch.from_numpy(q).cuda(), None if offsets is None else torch.from_numpy(offsets).cuda(),
                       pooling=pooling)
    assert out.is_cuda
    return out.float().cpu().numpy() if out.dtype == torch.bfloat16 else out.cpu().numpy().astype(np.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("cache_bytes", [0, 1 << 14])
def test_gpu_lookup_of_a_tiered_store(pool_name, tmp_path, dtype, pooling, cache_bytes):
    """The GPU lookup reads rows with a copy from host memory and the others from the tier (the
    host between its two launches); repeated lookups promote hot rows, and writes, erases and a
    reopen keep every row right."""
    torch = _torch_cuda()
    dim = 40
    store, ids, table = make_tiered(pool_name, tmp_path / "tier", dim, dtype, 3000, host_rows=300, engine="gpu",
                                    cache_bytes=cache_bytes)
    rng = np.random.default_rng(11)
    hot = ids[300:550]  # no copies at first; fewer than the slots, so copies are not dropped again
    reads = []
    for rep in range(4):
        q, offsets = bags(rng, hot, 300, 10, missing=-9)
        q = np.concatenate([q, rng.choice(ids, 50)])  # cold rows too
        if pooling is None:
            offsets = None
        before = store.stats()["tier_reads"]
        got = _gpu_lookup(torch, store, q, offsets, pooling)
        np.testing.assert_allclose(got, reference(table, q, offsets, pooling, dim), rtol=tol(dtype) * 4, atol=tol(dtype) * 4)
        reads.append(store.stats()["tier_reads"] - before)
    s = store.stats()
    assert reads[0] > 100 and s["tier_promotions"] > 100, (reads, s)
    assert reads[-1] < reads[0] / 2, reads  # promoted rows (or, with the cache, cached ones) leave the tier alone
    assign_and_erase(store, table, np.concatenate([hot[:30], ids[:30]]), hot[30:40], rng, dtype)
    q = np.concatenate([ids, np.array([-3], np.int64)])
    np.testing.assert_allclose(_gpu_lookup(torch, store, q, None, None), reference(table, q, None, None, dim),
                               rtol=tol(dtype) * 4, atol=tol(dtype) * 4)
    store.close()
    store = gphash.EmbeddingStore.open(pool_name, engine="gpu", cache_bytes=cache_bytes)
    np.testing.assert_allclose(_gpu_lookup(torch, store, q, None, None), reference(table, q, None, None, dim),
                               rtol=tol(dtype) * 4, atol=tol(dtype) * 4)
    store.close()
    assert gphash.check_pool(pool_name)["ok"]


def test_gpu_lookup_of_a_tiered_store_without_promotion_and_in_a_cuda_graph(pool_name, tmp_path):
    torch = _torch_cuda()
    store = gphash.EmbeddingStore.create(pool_name, 4, capacity=400, replace=True, host_rows=100,
                                         tier_path=tmp_path / "tier", tier_promotion=False, engine="gpu")
    ids = np.arange(1, 301, dtype=np.int64)
    store.insert_or_assign(ids, np.tile(ids[:, None].astype(np.float32), (1, 4)))
    tq = torch.from_numpy(ids).cuda()
    for _ in range(3):
        np.testing.assert_array_equal(store.lookup(tq, pooling=None).cpu().numpy(), np.tile(ids[:, None], (1, 4)))
    s = store.stats()
    assert s["tier_promotions"] == 0 and s["tier_reads"] == 3 * 200, s
    # The host joins every lookup half way: no CUDA graph can hold one.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        store.lookup(tq, pooling=None)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    raised = None
    try:
        with torch.cuda.graph(graph, stream=side):
            try:
                store.lookup(tq, pooling=None)
            except gphash.Error as e:
                raised = e
    except RuntimeError:
        pass  # torch may refuse to end a capture that holds nothing
    assert raised is not None and raised.code == "InvalidArgument" and "CUDA graph" in str(raised), raised
    torch.cuda.synchronize()
    store.close()

"""gphash.EmbeddingStore: lookups against a plain NumPy gather, for every dtype and pooling, with
duplicates and missing IDs; writes; crash and reopen; typed errors. The GPU cases (CUDA tensors)
run where torch sees a GPU and gphash was built with CUDA."""
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gphash

DTYPES = ["float32", "float16", "bfloat16"]
POOLINGS = [None, "sum", "mean"]


def to_f32(rows, dtype):
    if dtype == "bfloat16":  # NumPy has no bfloat16: rows are their raw bits (uint16)
        return (rows.astype(np.uint32) << 16).view(np.float32)
    return rows.astype(np.float32)


def from_f32(values, dtype):
    if dtype == "bfloat16":
        bits = values.astype(np.float32).view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return values.astype(dtype)


def reference(table, ids, offsets, pooling, dim, default=0.0, include_last=False):
    """The plain gather: a dict from id to float32 row."""
    rows = np.array([table.get(int(i), np.full(dim, default, np.float32)) for i in ids], dtype=np.float32).reshape(len(ids), dim)
    if offsets is None:
        return rows
    ends = list(offsets[1:]) + ([] if include_last else [len(ids)])
    starts = list(offsets[:-1]) if include_last else list(offsets)
    out = np.zeros((len(starts), dim), np.float32)
    for b, (s, e) in enumerate(zip(starts, ends)):
        if e > s:
            out[b] = rows[s:e].sum(0) / ((e - s) if pooling == "mean" else 1)
    return out


def tol(dtype):
    return {"float32": 1e-5, "float16": 2e-3, "bfloat16": 2e-2}[dtype]


def make_store(pool_name, dim, dtype, n=1000, seed=0, **kw):
    store = gphash.EmbeddingStore.create(pool_name, dim, dtype=dtype, capacity=4 * n, replace=True, **kw)
    rng = np.random.default_rng(seed)
    ids = rng.choice(10**12, size=n, replace=False).astype(np.int64)
    values = rng.standard_normal((n, dim)).astype(np.float32)
    stored = from_f32(values, dtype)
    store.insert_or_assign(ids, stored)
    table = {int(i): to_f32(stored[k:k + 1], dtype)[0] for k, i in enumerate(ids)}
    return store, ids, table


def bags(rng, ids, n_bags, max_len, missing):
    parts, offsets, pos = [], [], 0
    for _ in range(n_bags):
        k = int(rng.integers(0, max_len + 1))
        bag = rng.choice(ids, size=k)  # with duplicates
        if k and rng.random() < 0.3:
            bag[0] = missing
        parts.append(bag)
        offsets.append(pos)
        pos += k
    return np.concatenate(parts).astype(np.int64), np.array(offsets, dtype=np.int64)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("dim", [1, 13, 64, 1024])
def test_lookup_matches_a_plain_gather(pool_name, dtype, pooling, dim):
    store, ids, table = make_store(pool_name, dim, dtype, n=300)
    rng = np.random.default_rng(dim)
    q, offsets = bags(rng, ids, 40, 12, missing=-5)
    if pooling is None:
        offsets = None
    out = store.lookup(q, offsets, pooling=pooling)
    assert out.shape == ((len(q) if offsets is None else len(offsets)), dim)
    np.testing.assert_allclose(to_f32(out, dtype), reference(table, q, offsets, pooling, dim), rtol=tol(dtype), atol=tol(dtype))
    store.close()


def test_include_last_offset_empty_bags_and_2d_ids(pool_name):
    store, ids, table = make_store(pool_name, 8, "float32", n=50)
    q = ids[[0, 1, 1, 2, 3]]
    offsets = np.array([0, 0, 3, 5], dtype=np.int64)  # an empty bag first
    out = store.lookup(q, offsets, pooling="sum", include_last_offset=True)
    np.testing.assert_allclose(out, reference(table, q, offsets, "sum", 8, include_last=True), rtol=1e-6)
    assert (out[0] == 0).all()
    two_d = ids[:6].reshape(3, 2)
    np.testing.assert_allclose(store.lookup(two_d, pooling="mean"),
                               reference(table, ids[:6], np.array([0, 2, 4]), "mean", 8), rtol=1e-6)
    assert store.lookup(two_d, pooling="sum", include_last_offset=True).shape == (3, 8)
    store.close()


def test_missing_ids_get_the_default_row_and_found_mask(pool_name):
    store = gphash.EmbeddingStore.create(pool_name, 4, default_value=0.5, replace=True)
    store.insert_or_assign(np.array([1], np.int64), np.ones((1, 4), np.float32))
    out, found = store.lookup(np.array([1, 2, 1], np.int64), pooling=None, found=True)
    assert list(found) == [1, 0, 1]
    assert (out[1] == 0.5).all() and (out[0] == 1).all()
    assert store.stats()["missing_ids"] == 1
    store.close()


def test_insert_or_assign_erase_find_or_insert_export(pool_name):
    store = gphash.EmbeddingStore.create(pool_name, 3, capacity=64, replace=True)
    ids = np.array([10, 11, 10], np.int64)  # the last row of a repeated id wins
    rows = np.array([[1, 1, 1], [2, 2, 2], [3, 3, 3]], np.float32)
    store.insert_or_assign(ids, rows)
    assert len(store) == 2
    np.testing.assert_array_equal(store.lookup(np.array([10, 11], np.int64), pooling=None), [[3, 3, 3], [2, 2, 2]])
    store.insert_or_assign(np.array([11], np.int64), np.full((1, 3), 9, np.float32))
    np.testing.assert_array_equal(store.lookup(np.array([11], np.int64), pooling=None), [[9, 9, 9]])
    assert store.erase(np.array([10, 10, 12], np.int64)) == 1
    assert len(store) == 1
    got = store.find_or_insert(np.array([11, 20, 21], np.int64), initializer="uniform", scale=0.1, seed=7)
    assert (got[0] == 9).all() and (np.abs(got[1:]) <= 0.1).all() and not (got[1] == got[2]).all()
    again = store.find_or_insert(np.array([20], np.int64), initializer="uniform", scale=0.1, seed=7)
    np.testing.assert_array_equal(again[0], got[1])  # now present: the same row
    k, v = store.export()
    assert sorted(k.tolist()) == [11, 20, 21]
    # Old rows of assignments and erased rows are reused: 64 rows are enough for many rewrites.
    for r in range(100):
        store.insert_or_assign(np.array([11], np.int64), np.full((1, 3), r, np.float32))
    assert store.stats()["rows_used"] == 3
    store.close()


def test_row_file_full_is_a_typed_error(pool_name):
    store = gphash.EmbeddingStore.create(pool_name, 2, capacity=4, replace=True)
    with pytest.raises(gphash.Error) as e:
        store.insert_or_assign(np.arange(5, dtype=np.int64), np.zeros((5, 2), np.float32))
    assert e.value.code == "NoSpace"
    store.close()


def test_bad_input_raises_typed_errors(pool_name):
    with pytest.raises(gphash.Error) as e:
        gphash.EmbeddingStore.create(pool_name, 0, replace=True)
    assert e.value.field == "dim"
    with pytest.raises(gphash.Error) as e:
        gphash.EmbeddingStore.create(pool_name, 1025, replace=True)
    assert e.value.field == "dim"
    with pytest.raises(gphash.Error) as e:
        gphash.EmbeddingStore.create(pool_name, 4, dtype="float64", replace=True)
    assert e.value.field == "dtype"
    store = gphash.EmbeddingStore.create(pool_name, 4, replace=True)
    ids = np.array([1, 2], np.int64)
    cases = [
        (lambda: store.insert_or_assign(ids.astype(np.int32), np.zeros((2, 4), np.float32)), "ids"),
        (lambda: store.insert_or_assign(ids, np.zeros((2, 4), np.float64)), "rows"),
        (lambda: store.insert_or_assign(ids, np.zeros((2, 5), np.float32)), "rows"),
        (lambda: store.insert_or_assign(ids, np.zeros((3, 4), np.float32)), "rows"),
        (lambda: store.insert_or_assign(np.array([-1], np.int64), np.zeros((1, 4), np.float32)), "ids"),
        (lambda: store.lookup(ids.astype(np.uint32), pooling=None), "ids"),
        (lambda: store.lookup(ids, np.array([1], np.int64), pooling="sum"), "offsets"),
        (lambda: store.lookup(ids, np.array([0, 3], np.int64), pooling="sum"), "offsets"),
        (lambda: store.lookup(ids, np.array([0, 2, 1], np.int64), pooling="sum"), "offsets"),
        (lambda: store.lookup(ids, np.array([0, 1], np.int64), pooling="sum", include_last_offset=True), "offsets"),
        (lambda: store.lookup(ids, np.array([0], np.int32), pooling="sum"), "offsets"),
        (lambda: store.lookup(ids, np.array([0], np.int64), pooling="max"), "pooling"),
        (lambda: store.lookup(ids, np.array([0], np.int64), pooling=None), "pooling"),
        (lambda: store.find_or_insert(ids, initializer="xavier"), "initializer"),
    ]
    for call, field in cases:
        with pytest.raises(gphash.Error) as e:
            call()
        assert e.value.code == "InvalidArgument" and e.value.field == field, (field, str(e.value))
    store.close()
    with pytest.raises(gphash.Error) as e:
        store.lookup(ids, pooling=None)
    assert e.value.code == "InvalidArgument"


def run_until_killed(child):
    """Runs Python source `child`, which writes, prints "acknowledged" and SIGKILLs itself."""
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(child)], capture_output=True, text=True, env=os.environ)
    assert "acknowledged" in p.stdout, p.stderr
    assert p.returncode == -signal.SIGKILL


def test_store_survives_a_killed_process(pool_name):
    """A child writes rows and dies by SIGKILL without closing; the store reopens with every
    acknowledged row, and check() finds the index consistent."""
    run_until_killed(f"""
        import os, signal, sys, numpy as np, gphash
        s = gphash.EmbeddingStore.create({pool_name!r}, 16, dtype="float16", capacity=10000, replace=True)
        ids = np.arange(1, 5001, dtype=np.int64)
        rows = (ids[:, None] * np.ones((1, 16))).astype(np.float16) / 1000
        s.insert_or_assign(ids, rows)
        s.insert_or_assign(ids[:100], -rows[:100])
        s.erase(ids[-10:])
        print("acknowledged", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    store = gphash.EmbeddingStore.open(pool_name)
    assert len(store) == 4990
    ids = np.arange(1, 5001, dtype=np.int64)
    want = ((ids[:, None] * np.ones((1, 16))).astype(np.float16) / 1000).astype(np.float32)
    want[:100] *= -1
    want[-10:] = 0
    out, found = store.lookup(ids, pooling=None, found=True)
    assert found.sum() == 4990
    np.testing.assert_allclose(out.astype(np.float32), want, rtol=2e-3)
    # The 100 rows replaced out of place are free again (rebuilt from the index at open).
    assert store.stats()["rows_used"] == 4990
    store.close()
    assert gphash.check_pool(pool_name)["ok"]


def test_reopen_with_another_dtype_keeps_the_stored_one(pool_name):
    s = gphash.EmbeddingStore.create(pool_name, 8, dtype="bfloat16", replace=True)
    s.close()
    s = gphash.EmbeddingStore.open(pool_name)
    assert s.dtype == "bfloat16" and s.dim == 8
    s.close()


# ---- PyTorch (CPU tensors everywhere torch installs; CUDA tensors on a GPU machine) ----

def _torch():
    return pytest.importorskip("torch")


def _cuda_ready(torch):
    if not (gphash.has_cuda and torch.cuda.is_available()):
        pytest.skip("needs a GPU and a CUDA build of gphash")


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_cpu_tensors(pool_name, dtype):
    torch = _torch()
    tdt = getattr(torch, dtype)
    store = gphash.EmbeddingStore.create(pool_name, 8, dtype=dtype, replace=True)
    ids = torch.arange(1, 51, dtype=torch.int64)
    rows = torch.randn(50, 8).to(tdt)
    store.insert_or_assign(ids, rows)
    out = store.lookup(ids, pooling=None)
    assert isinstance(out, torch.Tensor) and out.dtype == tdt
    assert torch.equal(out, rows)
    offsets = torch.tensor([0, 10, 30], dtype=torch.int64)
    ref = torch.nn.functional.embedding_bag(ids - 1, rows.float(), offsets, mode="sum")
    torch.testing.assert_close(store.lookup(ids, offsets, pooling="sum").float(), ref, rtol=tol(dtype) * 4, atol=tol(dtype) * 4)
    store.close()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("cache_bytes", [0, 1 << 20])
def test_gpu_lookup_matches_cpu_lookup(pool_name, dtype, pooling, cache_bytes):
    torch = _torch()
    _cuda_ready(torch)
    store, ids, table = make_store(pool_name, 40, dtype, n=5000, engine="gpu", cache_bytes=cache_bytes)
    rng = np.random.default_rng(3)
    for rep in range(3):  # repeats: the cache admits rows, later lookups hit
        q, offsets = bags(rng, ids[:500], 2000, 20, missing=-7)
        if pooling is None:
            offsets = None
        want = reference(table, q, offsets, pooling, 40)
        tq = torch.from_numpy(q).cuda()
        toff = None if offsets is None else torch.from_numpy(offsets).cuda()
        out = store.lookup(tq, toff, pooling=pooling)
        assert out.is_cuda
        got = out.float().cpu().numpy() if dtype == "bfloat16" else out.cpu().numpy().astype(np.float32)
        np.testing.assert_allclose(got, want, rtol=tol(dtype) * 4, atol=tol(dtype) * 4)
    st = store.stats()
    assert st["unique_ids"] > 0
    if cache_bytes:
        assert st["cache_hits"] > 0
    # A write drops the cached row: the next lookup sees the new one.
    one = torch.tensor([ids[0]], dtype=torch.int64)
    new_row = from_f32(np.full((1, 40), 3.0, np.float32), dtype)
    store.insert_or_assign(one.numpy(), new_row)
    got = store.lookup(one.cuda(), pooling=None).float().cpu().numpy()
    np.testing.assert_allclose(got, np.full((1, 40), 3.0), rtol=1e-2)
    store.close()


@pytest.mark.parametrize("dim,dtype", [(1, "float32"), (16, "float16"), (16, "float32"), (32, "float32"),
                                       (96, "bfloat16"), (100, "float32"), (1024, "float32")])
def test_gpu_gather_of_every_row_stride(pool_name, dim, dtype):
    """Misses gathered from host memory by warps: rows of 32, 64, 128, 256, 512 and 4096 bytes'
    stride, each equal to the CPU's reference, with and without bags."""
    torch = _torch()
    _cuda_ready(torch)
    store, ids, table = make_store(pool_name, dim, dtype, n=3000, engine="gpu")
    rng = np.random.default_rng(dim)
    q, offsets = bags(rng, ids, 700, 12, missing=-3)
    for off in (None, offsets):
        want = reference(table, q, off, "sum" if off is not None else None, dim)
        out = store.lookup(torch.from_numpy(q).cuda(), None if off is None else torch.from_numpy(off).cuda(),
                           pooling="sum" if off is not None else None)
        got = out.float().cpu().numpy()
        np.testing.assert_allclose(got, want, rtol=tol(dtype) * 4, atol=tol(dtype) * 4)
    store.close()


def test_gpu_lookup_empty_and_large_batches(pool_name):
    torch = _torch()
    _cuda_ready(torch)
    store, ids, table = make_store(pool_name, 16, "float32", n=20000, engine="gpu", cache_bytes=1 << 18)
    empty = store.lookup(torch.empty(0, dtype=torch.int64, device="cuda"), pooling=None)
    assert empty.shape == (0, 16)
    q = np.random.default_rng(0).choice(ids, size=65536)
    got = store.lookup(torch.from_numpy(q).cuda(), pooling=None).cpu().numpy()
    np.testing.assert_allclose(got, reference(table, q, None, None, 16), rtol=1e-6)
    store.close()


def test_gpu_lookups_in_a_row_on_several_streams(pool_name):
    """Many lookups back to back (the dedup table and the counts are handed from one lookup to the
    next in GPU memory), on alternating streams, sizes growing and shrinking, and lookups with no
    bags at all between them: each equals the CPU's reference."""
    torch = _torch()
    _cuda_ready(torch)
    store, ids, table = make_store(pool_name, 24, "float32", n=6000, engine="gpu", cache_bytes=1 << 19,
                                   aging_interval=3)
    rng = np.random.default_rng(11)
    streams = [torch.cuda.current_stream(), torch.cuda.Stream(), torch.cuda.Stream()]
    pending = []
    for k in range(40):
        q, offsets = bags(rng, ids[:800], int(rng.integers(1, 1500)), 12, missing=-3)
        with torch.cuda.stream(streams[k % 3]):
            tq, toff = torch.from_numpy(q).cuda(), torch.from_numpy(offsets).cuda()
            pending.append((store.lookup(tq, toff, pooling="mean"), reference(table, q, offsets, "mean", 24)))
            if k % 7 == 0:  # ids but no bags: the lookup still runs its kernels and must leave no trace
                none = store.lookup(tq, toff[:1], pooling="sum", include_last_offset=True)
                assert none.shape == (0, 24)
    torch.cuda.synchronize()
    for out, want in pending:
        np.testing.assert_allclose(out.cpu().numpy(), want, rtol=1e-5, atol=1e-5)
    st = store.stats()
    assert st["cache_hits"] > 0 and st["lookups"] == 40 + 6
    # Writes reach the GPU's copy of the index: erased IDs get the default row, reassigned ones
    # their new row, new ones theirs; and a reopened store copies the index again.
    gone, moved, new = ids[:50], ids[50:100], np.arange(-60, -10, dtype=np.int64)
    store.erase(gone)
    new_rows = np.full((100, 24), 7.0, np.float32)
    store.insert_or_assign(np.concatenate([moved, new]), new_rows)
    for i in gone:
        table.pop(int(i))
    for i in np.concatenate([moved, new]):
        table[int(i)] = new_rows[0]
    q = np.concatenate([gone, moved, new, ids[100:300]])
    for reopen in (False, True):
        if reopen:
            store.close()
            store = gphash.EmbeddingStore.open(pool_name, engine="gpu", cache_bytes=1 << 19)
        got = store.lookup(torch.from_numpy(q).cuda(), pooling=None).cpu().numpy()
        np.testing.assert_allclose(got, reference(table, q, None, None, 24), rtol=1e-6)
    store.close()


def test_gpu_lookup_in_a_cuda_graph(pool_name):
    """A lookup captured in a CUDA graph after a warm-up and replayed with new IDs copied into its
    input gives the rows of those IDs (nothing is decided on the host per lookup), also after
    writes that move the index; plain lookups still work afterwards."""
    torch = _torch()
    _cuda_ready(torch)
    store, ids, table = make_store(pool_name, 32, "float32", n=5000, engine="gpu", cache_bytes=1 << 19)
    rng = np.random.default_rng(5)
    n_bags, per = 512, 4
    offsets = torch.arange(0, n_bags * per, per, device="cuda")
    static_ids = torch.from_numpy(rng.choice(ids, size=n_bags * per)).cuda()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            store.lookup(static_ids, offsets, pooling="sum")
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        static_out = store.lookup(static_ids, offsets, pooling="sum")
    for _ in range(12):
        q = rng.choice(ids, size=n_bags * per)
        q[::17] = -5  # missing: the default row (zeros)
        static_ids.copy_(torch.from_numpy(q))
        graph.replay()
        want = reference(table, q, offsets.cpu().numpy(), "sum", 32)
        np.testing.assert_allclose(static_out.cpu().numpy(), want, rtol=1e-5, atol=1e-5)
    # Writes after the capture: 12,000 new IDs (the GPU's copy of the index grows, so its memory
    # moves) and new rows for old ones. Replays see them without capturing again.
    new_ids = np.arange(10**13, 10**13 + 12000, dtype=np.int64)
    new_rows = rng.standard_normal((12000, 32)).astype(np.float32)
    store.insert_or_assign(new_ids, new_rows)
    store.insert_or_assign(ids[:100], new_rows[:100])
    table.update({int(i): new_rows[k] for k, i in enumerate(new_ids)})
    table.update({int(i): new_rows[k] for k, i in enumerate(ids[:100])})
    for _ in range(4):
        q = np.concatenate([rng.choice(new_ids, size=n_bags * per // 2), rng.choice(ids[:400], size=n_bags * per // 2)])
        static_ids.copy_(torch.from_numpy(q))
        graph.replay()
        want = reference(table, q, offsets.cpu().numpy(), "sum", 32)
        np.testing.assert_allclose(static_out.cpu().numpy(), want, rtol=1e-5, atol=1e-5)
    q = rng.choice(ids, size=100)
    got = store.lookup(torch.from_numpy(q).cuda(), pooling=None).cpu().numpy()
    np.testing.assert_allclose(got, reference(table, q, None, None, 32), rtol=1e-6)
    del graph
    store.close()


@pytest.mark.parametrize("damage,code", [("truncate", "Truncated"), ("short", "Truncated"), ("magic", "NotAPool"),
                                         ("field", "ChecksumMismatch"), ("missing", "NotFound")])
def test_damaged_row_file_is_a_typed_error(pool_name, damage, code):
    store = gphash.EmbeddingStore.create(pool_name, 8, capacity=1000, replace=True)
    store.insert_or_assign(np.arange(1, 11, dtype=np.int64), np.ones((10, 8), np.float32))
    store.close()
    path = f"/dev/shm/{pool_name}.rows"
    if damage == "truncate":
        os.truncate(path, 4096 + 999 * 32)
    elif damage == "short":
        os.truncate(path, 100)
    elif damage == "missing":
        os.unlink(path)
    else:
        with open(path, "r+b") as f:
            f.seek(0 if damage == "magic" else 16)  # the magic, or dim
            f.write(b"\x7f")
    with pytest.raises(gphash.Error) as e:
        gphash.EmbeddingStore.open(pool_name)
    assert e.value.code == code, str(e.value)

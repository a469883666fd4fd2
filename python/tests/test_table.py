"""gphash.Table from Python: batches on NumPy arrays (and torch CPU tensors), errors, info, check, export."""
import numpy as np
import pytest

import gphash


def test_batch_ops_follow_their_statuses(pool_name):
    with gphash.Table.create(pool_name, key_width=8, value_width=8) as t:
        keys = np.arange(1, 2001, dtype=np.uint64)
        assert (t.insert(keys, keys * 3) == gphash.OK).all()
        assert (t.insert(keys[:10], keys[:10]) == gphash.EXISTS).all()
        assert len(t) == 2000
        values, status = t.search(np.concatenate([keys, np.array([9999], dtype=np.uint64)]))
        assert (status[:-1] == gphash.OK).all() and status[-1] == gphash.NOT_FOUND
        assert (values[:-1] == keys * 3).all()
        assert (t.update(np.array([1, 777777], dtype=np.uint64), np.array([5, 5], dtype=np.uint64)) ==
                [gphash.OK, gphash.NOT_FOUND]).all()
        assert (t.upsert(np.array([1, 5000], dtype=np.uint64), np.array([6, 7], dtype=np.uint64)) == gphash.OK).all()
        values, status = t.search(np.array([1, 5000], dtype=np.uint64))
        assert list(values) == [6, 7]
        assert (t.erase(keys[:100]) == gphash.OK).all()
        assert (t.erase(keys[:1]) == gphash.NOT_FOUND).all()
        assert len(t) == 1901


def test_wide_keys_and_values_as_byte_rows(pool_name):
    with gphash.Table.create(pool_name, key_width=16, value_width=40) as t:
        rng = np.random.default_rng(1)
        keys = rng.integers(0, 256, size=(500, 16), dtype=np.uint8)
        keys[:, 0] = np.arange(500) % 256
        keys[:, 1] = np.arange(500) // 256
        values = rng.integers(0, 256, size=(500, 40), dtype=np.uint8)
        assert (t.upsert(keys, values) == gphash.OK).all()
        out, status = t.search(keys)
        assert (status == gphash.OK).all() and (out == values).all()
        with pytest.raises(gphash.Error) as e:
            t.search(np.zeros((3, 8), dtype=np.uint8))
        assert e.value.code == "InvalidArgument" and e.value.field == "keys"


def test_info_check_export_and_reopen(pool_name):
    t = gphash.Table.create(pool_name, key_width=8, value_width=8, capacity=4096)
    keys = np.arange(10, 1010, dtype=np.uint64)
    t.upsert(keys, keys + 1)
    info = t.info()
    assert info["items"] == 1000 and info["key_width"] == 8 and info["shape"] == "2L-2H-8S"
    assert t.check()["ok"]
    k, v = t.export()
    order = np.argsort(k)
    assert (k[order] == keys).all() and (v[order] == keys + 1).all()
    t.close()
    with pytest.raises(gphash.Error):
        len(t)
    assert gphash.check_pool(pool_name)["ok"]
    assert gphash.inspect(pool_name)["items"] == 1000
    with gphash.Table.open(pool_name) as t2:
        v, s = t2.search(keys)
        assert (s == gphash.OK).all() and (v == keys + 1).all()


def test_errors_carry_codes(pool_name):
    with pytest.raises(gphash.Error) as e:
        gphash.Table.open(pool_name)
    assert e.value.code == "NotFound"
    gphash.Table.create(pool_name).close()
    with pytest.raises(gphash.Error) as e:
        gphash.Table.create(pool_name)
    assert e.value.code == "PoolExists"
    with pytest.raises(gphash.Error) as e:
        gphash.Table.create(pool_name, replace=True, engine="tpu")
    assert e.value.code == "InvalidArgument" and e.value.field == "engine"
    with pytest.raises(gphash.Error) as e:
        gphash.Table.create(pool_name, replace=True, key_width=12)
    assert e.value.code in ("InvalidArgument", "KeyWidthMismatch")
    assert issubclass(gphash.Error, RuntimeError)


def test_sharded_table_matches_one_table(tmp_path):
    pool = str(tmp_path / "sharded")  # NAME.shard0 .. NAME.shard2 in tmp_path (CPU engine)
    rng = np.random.default_rng(7)
    keys = rng.integers(1, 5000, size=20000, dtype=np.uint64)  # many duplicates
    with gphash.Table.create(pool, capacity=1024, shards=[0, 0, 0]) as t, \
            gphash.Table.create("mem:", capacity=1024) as one:
        assert (t.upsert(keys, keys * 2) == one.upsert(keys, keys * 2)).all()
        assert (t.erase(keys[:3000]) == one.erase(keys[:3000])).all()
        probe = rng.integers(1, 6000, size=5000, dtype=np.uint64)
        (v1, s1), (v2, s2) = t.search(probe), one.search(probe)
        assert (s1 == s2).all() and (v1[s1 == gphash.OK] == v2[s2 == gphash.OK]).all()
        assert len(t) == len(one) and t.info()["items"] == len(one) and t.info()["shard_count"] == 3
        assert t.check()["ok"]
    shard = gphash.inspect(pool + ".shard1")
    assert shard["items"] > 0 and shard["shard_index"] == 1 and shard["shard_count"] == 3
    with pytest.raises(gphash.Error) as e:
        gphash.Table.open(pool, shards=[0, 0])
    assert e.value.code == "ShardMismatch" and e.value.field == "shards"
    with pytest.raises(gphash.Error) as e:
        gphash.Table.open(pool + ".shard0")
    assert e.value.code == "ShardMismatch"
    with gphash.Table.open(pool, shards=[0, 0, 0]) as t:
        assert len(t) == len(np.setdiff1d(np.unique(keys), keys[:3000]))


def test_reserved_key_is_reported_per_operation(pool_name):
    with gphash.Table.create(pool_name) as t:
        s = t.upsert(np.array([2**64 - 1, 3], dtype=np.uint64), np.array([1, 1], dtype=np.uint64))
        assert list(s) == [gphash.RESERVED_KEY, gphash.OK]


def test_torch_cpu_tensors_through_dlpack(pool_name):
    torch = pytest.importorskip("torch")
    with gphash.Table.create(pool_name) as t:
        keys = torch.arange(1, 101, dtype=torch.int64)
        assert (t.upsert(keys, keys * 2) == gphash.OK).all()
        values, status = t.search(keys)
        assert isinstance(values, torch.Tensor)
        assert (status == gphash.OK).all() and (values.to(torch.int64) == keys * 2).all()


def test_gpu_batches_on_cuda_tensors(pool_name):
    torch = pytest.importorskip("torch")
    if not (gphash.has_cuda and torch.cuda.is_available()):
        pytest.skip("needs a GPU and a CUDA build")
    with gphash.Table.create(pool_name, engine="gpu") as t:
        keys = torch.arange(1, 100001, dtype=torch.int64, device="cuda")
        status = t.upsert(keys, keys * 7)  # enqueued on the current stream
        values, found = t.search(keys)     # ordered after it on the same stream
        torch.cuda.current_stream().synchronize()
        assert status.is_cuda and values.is_cuda
        assert (status == gphash.OK).all() and (found == gphash.OK).all()
        assert (values.to(torch.int64) == keys * 7).all()
        t.last_event.wait()
        assert len(t) == 100000


def test_cache_options_are_checked(pool_name):
    for kwargs, field in [({"cache": "lfx"}, "cache"), ({"cache_fraction": 1.5}, "cache_fraction"),
                          ({"cache_fraction": -0.1}, "cache_fraction")]:
        with pytest.raises(gphash.Error) as e:
            gphash.Table.create(pool_name, replace=True, **kwargs)
        assert (e.value.code, e.value.field) == ("InvalidArgument", field), (kwargs, str(e.value))
    # The CPU engine has no GPU memory to cache in: the options are accepted and hold nothing.
    with gphash.Table.create(pool_name, replace=True, cache="lfu", cache_bytes=1 << 30) as t:
        keys = np.arange(1, 1001, dtype=np.uint64)
        t.upsert(keys, keys)
        info = t.info()
        assert info["cache_gpu_bytes"] == 0 and info["cache_lookups"] == 0 and info["cache_lines"] == 0
    with gphash.Table.open(pool_name, cache="random", cache_fraction=1.0) as t:
        assert len(t) == 1000


def test_gpu_complete_cache_serves_every_hit(pool_name):
    if not gphash.has_cuda:
        pytest.skip("needs a CUDA build")
    try:
        t = gphash.Table.create(pool_name, key_width=8, value_width=32, capacity=200_000, engine="gpu",
                                cache="lfu", cache_bytes=1 << 30, replace=True)
    except gphash.Error as e:
        if e.code == "NoGpu":
            pytest.skip("no GPU")
        raise
    with t:
        rng = np.random.default_rng(3)
        keys = np.arange(1, 100_001, dtype=np.uint64)
        values = rng.integers(0, 256, size=(len(keys), 32), dtype=np.uint8)
        assert (t.upsert(keys, values) == gphash.OK).all()
        for _ in range(4):  # the first batches fill the copy; the switch comes once it is done
            t.search(keys)
        before = t.info()
        assert before["cache_phases"] == 1 and before["cache_lines"] * 8 == before["slots"]
        out, status = t.search(keys)
        assert (status == gphash.OK).all() and (out == values).all()
        after = t.info()
        assert after["cache_lookups"] - before["cache_lookups"] == len(keys)
        assert after["cache_hits"] - before["cache_hits"] == len(keys)

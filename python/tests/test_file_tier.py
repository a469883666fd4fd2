"""gphash.FileTier: rows in a regular file read back by index, with io_uring and with pread."""
import os

import numpy as np
import pytest

import gphash


@pytest.mark.parametrize("dim,dtype", [(1, "float32"), (64, "float32"), (100, "float16"), (1024, "float32")])
def test_reads_return_what_was_written(tmp_path, dim, dtype):
    path = str(tmp_path / "tier.rows")
    tier = gphash.FileTier.create(path, dim, 3000, dtype=dtype)
    rng = np.random.default_rng(dim)
    rows = rng.permutation(3000)[:1000].astype(np.uint64)
    data = rng.standard_normal((1000, dim)).astype(dtype)
    tier.write_rows(rows, data)
    bulk = np.arange(1000, 1100, dtype=np.uint64)  # a consecutive run: written in one piece
    tier.write_rows(bulk, data[:100])
    np.testing.assert_array_equal(tier.read_rows(bulk[::-1]), data[:100][::-1])
    rows[rows >= 1000] = rows[rows >= 1000] % 1000 + 1100  # keep the scattered rows off the run
    rows = np.unique(rows)
    data = data[:len(rows)]
    tier.write_rows(rows, data)
    order = rng.permutation(len(rows))
    for uring in (True, False):
        out = tier.read_rows(rows[order], use_io_uring=uring)
        np.testing.assert_array_equal(out, data[order])
    assert os.path.getsize(path) >= 3000 * dim * np.dtype(dtype).itemsize
    print("io_uring:", tier.uses_io_uring, "O_DIRECT:", tier.direct)
    tier.close()


def test_bad_rows_are_typed_errors(tmp_path):
    tier = gphash.FileTier.create(str(tmp_path / "t"), 4, 10)
    with pytest.raises(gphash.Error) as e:
        tier.read_rows(np.array([10], np.uint64))
    assert e.value.code == "InvalidArgument" and e.value.field == "rows"
    with pytest.raises(gphash.Error) as e:
        tier.write_rows(np.array([1], np.uint64), np.zeros((1, 5), np.float32))
    assert e.value.field == "data"
    with pytest.raises(gphash.Error) as e:
        tier.read_rows(np.array([1], np.int32))
    assert e.value.field == "rows"
    with pytest.raises(gphash.Error):
        gphash.FileTier.create(str(tmp_path / "u"), 0, 10)
    tier.close()

"""gphash: a persistent GPU hash index and an embedding store, from Python.

    import numpy as np, gphash
    with gphash.Table.create("demo", key_width=8, value_width=8, replace=True) as t:
        keys = np.arange(1, 1001, dtype=np.uint64)
        t.upsert(keys, keys * 10)
        values, status = t.search(keys)        # status == gphash.OK where found

Arrays are NumPy arrays or PyTorch tensors (CPU or CUDA), passed zero-copy through DLPack.
With CUDA tensors (a table opened with engine="gpu") a batch is enqueued on the current CUDA
stream (torch.cuda.current_stream()) and the call returns at once: its outputs are ready for
work enqueued on that stream afterwards; ``table.last_event.wait()`` waits for durability.
Errors raise :class:`gphash.Error`; its ``code`` is the C++ ErrorCode's name without the k
("NotFound", "PoolExists", "InvalidArgument", ...) and ``field`` the argument it is about.
"""
from __future__ import annotations

import numpy as _np

from . import _gphash
from ._gphash import Error, check_pool, inspect, has_cuda  # noqa: F401

__all__ = ["Table", "EmbeddingStore", "FileTier", "Error", "check_pool", "inspect", "has_cuda",
           "OK", "NOT_FOUND", "EXISTS", "HEAP_FULL", "TABLE_FULL", "RESERVED_KEY"]

# Per-operation statuses (gphash::OpStatus), as the uint8 values batches return.
OK, NOT_FOUND, EXISTS, HEAP_FULL, TABLE_FULL, RESERVED_KEY, CORRUPT_VALUE, INVALID_OP = range(8)
_SEARCH, _INSERT, _UPSERT, _UPDATE, _ERASE = range(5)


def _error(message, field="", code="InvalidArgument"):
    e = Error(message)
    e.code, e.field = code, field
    return e


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _torch():
    import torch
    return torch


def _on_cuda(x):
    return _is_torch(x) and x.is_cuda


def _stream_of(x):
    """The current CUDA stream of x's device, as an integer handle (0 for host arrays)."""
    if not _on_cuda(x):
        return 0
    return _current_stream_handle(x.device)


def _current_stream_handle(device):
    """The current CUDA stream of a torch device as an integer handle. torch's raw accessor (what
    Triton uses) where it exists: torch.cuda.current_stream() builds a Stream object, microseconds
    a lookup of a small batch notices."""
    torch = _torch()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(device.index if device.index is not None else torch.cuda.current_device())
    return torch.cuda.current_stream(device).cuda_stream


_TORCH_DTYPES = {}


def _torch_dtype(name):
    if not _TORCH_DTYPES:
        torch = _torch()
        _TORCH_DTYPES.update({"uint8": torch.uint8, "uint64": torch.int64,  # torch's uint64 lacks most ops: same bytes
                              "int64": torch.int64, "float32": torch.float32, "float16": torch.float16,
                              "bfloat16": torch.bfloat16})
    return _TORCH_DTYPES[name]


def _empty(like, shape, dtype):
    """An uninitialised array of the same library and device as `like`. dtype is a NumPy dtype name."""
    if _is_torch(like):
        return _torch().empty(shape, dtype=_torch_dtype(dtype), device=like.device)
    if dtype == "bfloat16":
        dtype = "uint16"  # NumPy has no bfloat16: the raw bits
    return _np.empty(shape, dtype=dtype)


def _contiguous(x):
    if _is_torch(x):
        return x.contiguous()
    return _np.ascontiguousarray(x)


class Table:
    """A gphash table in a pool. Use :meth:`create` or :meth:`open`; close with :meth:`close`
    or a ``with`` block."""

    def __init__(self, native):
        self._t = native
        self.last_event = None

    @classmethod
    def create(cls, pool, *, key_width=8, value_width=8, capacity=1 << 20, shape="2L-2H-8S",
               hash_seed=None, engine="cpu", placement="host", replace=False, threads=0, shards=None,
               cache="off", cache_fraction=0.2, cache_bytes=0):
        """Creates a pool ("NAME" = /dev/shm/NAME, "mem:" = anonymous memory, or a path).

        ``shards=[0, 1]`` shards the table over GPUs 0 and 1 (one pool per entry, NAME.shard<k>;
        ``[0, 0]``: two shards on GPU 0; the CPU engine uses only the count). With the GPU engine,
        CUDA tensors are routed on their own GPU and each shard's part reaches its GPU by a peer
        copy; such a batch runs before the call returns.

        ``cache`` ("off", "lfu", "lru", "random"): BktCache, GPU-memory copies of buckets of a
        host-placed table (GPU engine). ``cache_bytes`` is a GPU-memory budget the cache sizes
        itself within: a complete copy of the table if it fits, which serves every operation on an
        existing key from GPU memory; without a budget, ``cache_fraction`` of the buckets (1:
        complete). ``info()`` reports ``cache_hits`` of ``cache_lookups`` and the lines loading
        phases read from host memory, ``cache_lines_loaded``."""
        return cls(_gphash.Table.create(pool, key_width, value_width, capacity, shape, hash_seed,
                                        engine, placement, replace, threads, list(shards or []),
                                        cache, cache_fraction, cache_bytes))

    @classmethod
    def open(cls, pool, *, engine="cpu", placement="host", read_only=False, threads=0, shards=None,
             cache="off", cache_fraction=0.2, cache_bytes=0):
        """Opens a pool; runs crash recovery first if it was not shut down cleanly. A sharded
        table needs ``shards`` with as many entries as it was created with (else
        gphash.Error ShardMismatch). ``cache``, ``cache_fraction``, ``cache_bytes``: as for
        :meth:`create`."""
        return cls(_gphash.Table.open(pool, engine, placement, read_only, threads, list(shards or []),
                                      cache, cache_fraction, cache_bytes))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._t.close()

    @property
    def key_width(self):
        return self._t.key_width()

    @property
    def value_width(self):
        return self._t.value_width()

    def __len__(self):
        return self._t.size()

    def _values_like(self, keys, n):
        vw = self.value_width
        return _empty(keys, (n,), "uint64") if vw == 8 else _empty(keys, (n, vw), "uint8")

    def _run(self, op, keys, values=None, want_values=False):
        keys = _contiguous(keys)
        if values is not None:
            values = _contiguous(values)
        n = len(keys)
        status = _empty(keys, (n,), "uint8")
        out = self._values_like(keys, n) if want_values else None
        ev = self._t.execute(op, keys, values, out, status, _stream_of(keys))
        if ev is not None:
            self.last_event = ev
        return out, status

    def search(self, keys):
        """Returns (values, status): status[i] == OK where keys[i] is present."""
        return self._run(_SEARCH, keys, want_values=True)

    def insert(self, keys, values):
        """Adds absent keys; status EXISTS (no change) for present ones."""
        return self._run(_INSERT, keys, values)[1]

    def upsert(self, keys, values):
        return self._run(_UPSERT, keys, values)[1]

    def update(self, keys, values):
        return self._run(_UPDATE, keys, values)[1]

    def erase(self, keys):
        return self._run(_ERASE, keys)[1]

    def info(self):
        return self._t.info()

    def check(self, threads=0):
        """Verifies the table's invariants; a dict with ok, violation, violations, items."""
        return self._t.check(threads)

    def export(self):
        """Every (key, value), as NumPy arrays."""
        n = len(self)
        kw = self.key_width
        keys = _np.empty(n, dtype=_np.uint64) if kw == 8 else _np.empty((n, kw), dtype=_np.uint8)
        values = self._values_like(keys, n)
        got = self._t.export_items(keys, values)
        return keys[:got], values[:got]


_POOLINGS = {None: "none", "none": "none", "sum": "sum", "mean": "mean"}


class EmbeddingStore:
    """Rows of int64 IDs (float32, float16 or bfloat16; dim 1..1024) in a pool.

    The index (a gphash Table: ID -> row) and the row file (POOL.rows) live side by side, so the
    store survives a crash of the process and reopens. With ``engine="gpu"``, lookups of CUDA
    tensors run on the GPU: dedup, index, aligned warp gather from host memory, and a cache of
    hot rows in GPU memory of ``cache_bytes``.
    """

    def __init__(self, native):
        self._s = native
        self._dim, self._dtype = native.dim(), native.dtype()  # fixed for the store's life

    @classmethod
    def create(cls, pool, dim, *, dtype="float32", capacity=1 << 20, default_value=0.0,
               engine="cpu", cache_bytes=0, cache_ways=8, aging_interval=64, replace=False, threads=0,
               host_rows=0, tier_path=None, tier_promotion=True):
        """host_rows and tier_path: a tier below host memory. Every row lives in the file
        tier_path (on a disk: written through, read with io_uring) and host memory holds copies of
        host_rows of them: those written while it has room, then, with tier_promotion, the rows
        lookups read from the tier twice, in place of the copies read least. With engine="gpu" a
        lookup of such a store waits for the host half way (it reads the rows without a copy), so it
        cannot be captured in a CUDA graph. host_rows=0: every row in host memory, no tier."""
        dtype = _dtype_name(dtype)
        return cls(_gphash.EmbeddingStore.create(pool, dim, dtype, capacity, default_value, engine,
                                                 cache_bytes, cache_ways, aging_interval, replace, threads,
                                                 host_rows, "" if tier_path is None else str(tier_path),
                                                 tier_promotion))

    @classmethod
    def open(cls, pool, *, engine="cpu", cache_bytes=0, cache_ways=8, aging_interval=64, threads=0,
             tier_promotion=True):
        return cls(_gphash.EmbeddingStore.open(pool, engine, cache_bytes, cache_ways, aging_interval, threads,
                                               tier_promotion))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._s.close()

    @property
    def dim(self):
        return self._dim

    @property
    def dtype(self):
        return self._dtype

    def __len__(self):
        return self._s.size()

    def stats(self):
        return self._s.stats()

    def insert_or_assign(self, ids, rows):
        """Writes rows (host-driven: CUDA tensors are copied to the host first)."""
        ids, rows = _host(_contiguous(ids)), _host(_contiguous(rows))
        self._s.insert_or_assign(ids, rows)

    def erase(self, ids):
        """Erases IDs; returns how many were present."""
        return self._s.erase(_host(_contiguous(ids)))

    def find_or_insert(self, ids, initializer="default", scale=0.01, seed=0):
        """Rows of the IDs; missing IDs are inserted first, filled by the initializer
        ("default": the store's default_value, "uniform": U(-scale, scale), "normal": N(0, scale)),
        reproducibly from seed and ID. Returns rows like ids' library (on ids' device)."""
        ids_c = _contiguous(ids)
        host_ids = _host(ids_c)
        out = _empty(host_ids, (len(host_ids), self.dim), self.dtype)
        self._s.find_or_insert(host_ids, out, initializer, float(scale), int(seed))
        if _on_cuda(ids_c):
            return out.to(ids_c.device, non_blocking=False)
        return out

    def lookup(self, ids, offsets=None, pooling="sum", include_last_offset=False, found=False):
        """Rows of `ids` (int64). With offsets, the rows of each bag are pooled ("sum" or
        "mean"); 2-D ids [bags, n] are bags of n; 1-D ids without offsets give one row per ID. Missing IDs get the
        default row. CUDA tensors run on the GPU on the current stream and return a CUDA tensor;
        host arrays run on the CPU. found=True (host only) also returns a uint8 mask per ID.
        A CUDA lookup can be captured in a CUDA graph once a lookup of at least its size has run
        on the capturing stream; replays see the store's later writes."""
        if pooling not in _POOLINGS:
            raise _error(f"pooling must be 'sum', 'mean' or None, not {pooling!r}", "pooling")
        if offsets is None and pooling is not None and _POOLINGS[pooling] != "none":
            pooling = None if _ndim(ids) == 1 else pooling
        ids = _contiguous(ids)
        if _ndim(ids) == 2 and offsets is None:  # [bags, ids per bag], as torch's EmbeddingBag
            bags, per = ids.shape
            offsets = _arange_like(ids, 0, bags * per, per)
            ids = ids.reshape(-1)
            include_last_offset = False  # the offsets made here have no last entry
        if offsets is not None:
            offsets = _contiguous(offsets)
            if _POOLINGS[pooling] == "none":
                raise _error("offsets need pooling 'sum' or 'mean'", "pooling")
            rows = len(offsets) - 1 if include_last_offset else len(offsets)
        else:
            rows = len(ids)
        out = _empty(ids, (max(rows, 0), self.dim), self.dtype)
        if _on_cuda(ids):
            if found:
                raise _error("found= is for host lookups", "found")
            self._lookup_cuda(ids, offsets, include_last_offset, _POOLINGS[pooling], out)
            return out
        mask = _empty(ids, (len(ids),), "uint8") if found else None
        self._s.lookup(ids, offsets, include_last_offset, _POOLINGS[pooling], out, mask, 0)
        return (out, mask) if found else out

    def _lookup_cuda(self, ids, offsets, include_last_offset, pooling, out):
        """CUDA tensors go by address, checked here: at small batches a lookup costs what the
        host spends on it, and DLPack conversions cost more than the kernel launches."""
        torch = _torch()
        if ids.dtype is not torch.int64 or ids.dim() != 1:
            raise _error("ids must be a 1-D int64 array", "ids")
        off, n_off = 0, 0
        if offsets is not None:
            if not _on_cuda(offsets) or offsets.device != ids.device:
                raise _error("offsets must be on the same device as ids", "offsets")
            if offsets.dtype is not torch.int64 or offsets.dim() != 1:
                raise _error("offsets must be a 1-D int64 array", "offsets")
            off, n_off = offsets.data_ptr(), offsets.numel()
        self._s.lookup_cuda(ids.data_ptr(), ids.numel(), off, n_off, include_last_offset, pooling, out.data_ptr(),
                            _current_stream_handle(ids.device))

    def export(self):
        """Every (ID, row), as NumPy arrays."""
        n = len(self)
        ids = _np.empty(n, dtype=_np.int64)
        rows = _empty(ids, (n, self.dim), self.dtype)
        got = self._s.export_rows(ids, rows)
        return ids[:got], rows[:got]


def _dtype_name(dtype):
    name = str(dtype).replace("torch.", "")
    if name in ("float", "float32", "<class 'numpy.float32'>"):
        return "float32"
    if name in ("half", "float16", "<class 'numpy.float16'>"):
        return "float16"
    if name == "bfloat16":
        return "bfloat16"
    raise _error(f"dtype must be float32, float16 or bfloat16, not {dtype}", "dtype")


def _host(x):
    if _on_cuda(x):
        return x.cpu()
    return x


def _ndim(x):
    return x.dim() if _is_torch(x) else _np.ndim(x)


def _arange_like(x, start, stop, step):
    if _is_torch(x):
        return _torch().arange(start, stop, step, dtype=_torch().int64, device=x.device)
    return _np.arange(start, stop, step, dtype=_np.int64)


class FileTier:
    """Embedding rows in a regular file, below host memory: the substitute for GDRec's GPU-driven
    NVMe path (our GPUs cannot drive an NVMe device). The CPU reads rows by index with io_uring
    (O_DIRECT where the file system allows it) into a host array, for the GPU a pinned one
    (``torch.empty(..., pin_memory=True)``). Falls back to pread without io_uring."""

    def __init__(self, native, dim, dtype):
        self._t, self.dim, self.dtype = native, dim, dtype

    @classmethod
    def create(cls, path, dim, capacity, *, dtype="float32"):
        dtype = _dtype_name(dtype)
        if not 1 <= dim <= 1024:
            raise _error(f"dim must be 1..1024, not {dim}", "dim")
        return cls(_gphash.FileTier.create(path, dim * (4 if dtype == "float32" else 2), capacity), dim, dtype)

    @property
    def uses_io_uring(self):
        return self._t.uses_io_uring()

    @property
    def direct(self):
        return self._t.direct()

    def write_rows(self, rows, data):
        self._t.write_rows(_contiguous(rows), _contiguous(data))

    def read_rows(self, rows, out=None, use_io_uring=True):
        rows = _contiguous(rows)
        if out is None:
            out = _empty(rows, (len(rows), self.dim), self.dtype)
        self._t.read_rows(rows, out, use_io_uring)
        return out

    def close(self):
        self._t.close()

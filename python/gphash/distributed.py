"""gphash.distributed: one embedding table sharded across the ranks of torch.distributed.

Each rank owns the rows of some IDs and keeps them in an EmbeddingStore of its own (pool
``POOL.rank<r>of<n>``), on its own GPU (one rank per GPU: call ``torch.cuda.set_device(local_rank)``
before creating it; the store's GPU engine runs on the current device) or on the CPU engine.

The owner of an ID is a hash of it: SplitMix64's finalizer of the ID's 64 bits, whose high 32 bits
are scaled to the world size (``(h >> 32) * world >> 32``). It depends on the ID and the world size
only, so every rank routes alike, and it is independent of the hashes the stores' tables use inside
(XXH64 keyed by each pool's seed), so every shard still sees uniform IDs.

A lookup sends each ID to its owner (all-to-all), each rank looks up the IDs it received in its
own store, and the rows come back (all-to-all) to where their IDs were, in the order of the IDs:
the result is what one store holding every row would return. Duplicated IDs are looked up as
many times as they appear (no dedup across ranks).

Every method that moves IDs (``insert_or_assign``, ``lookup``, ``size``) is a collective: every
rank of the group calls it, the same number of times in the same order, each with IDs of its own
(possibly none), as for any torch.distributed collective.

    dist.init_process_group("nccl")           # or "gloo" on the CPU
    torch.cuda.set_device(local_rank)
    table = ShardedEmbedding.create("emb", dim=64, capacity=10_000_000, engine="gpu")
    rows = table.lookup(ids.cuda())           # [len(ids), 64]
"""
from __future__ import annotations

import torch as _torch
import torch.distributed as _dist

from . import EmbeddingStore, _error

__all__ = ["ShardedEmbedding", "owner_of"]

_MASK32 = (1 << 32) - 1


def _signed(c):
    return c - (1 << 64) if c >= 1 << 63 else c


_M1, _M2 = _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def _shr(z, s):
    """Logical right shift of int64 tensors (>> is arithmetic on signed values)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def owner_of(ids, world):
    """The rank (0 .. world-1) that owns each int64 ID (a tensor or a NumPy array)."""
    z = _torch.as_tensor(ids).to(_torch.int64)
    z = (z ^ _shr(z, 30)) * _M1  # int64 products wrap, as the unsigned 64-bit ones of SplitMix64
    z = (z ^ _shr(z, 27)) * _M2
    z = z ^ _shr(z, 31)
    return ((_shr(z, 32) & _MASK32) * world) >> 32


class ShardedEmbedding:
    """An embedding table whose rows are spread over the ranks of a process group.

    Use :meth:`create` or :meth:`open` (collectively: every rank calls it); ``store`` is this
    rank's own :class:`gphash.EmbeddingStore`.
    """

    def __init__(self, store, group=None):
        self.store = store
        self.group = group
        self.rank = _dist.get_rank(group)
        self.world = _dist.get_world_size(group)
        backend = _dist.get_backend(group)
        # NCCL moves CUDA tensors; gloo moves host tensors.
        self._comm_device = _torch.device("cuda", _torch.cuda.current_device()) if backend == "nccl" else _torch.device("cpu")
        self._gpu_lookups = self._comm_device.type == "cuda"

    @staticmethod
    def shard_pool(pool, rank, world):
        return f"{pool}.rank{rank}of{world}"

    @classmethod
    def create(cls, pool, dim, *, capacity, group=None, capacity_per_rank=None, **store_options):
        """Creates this rank's shard of a table of ``capacity`` rows in all; ``store_options`` go
        to :meth:`gphash.EmbeddingStore.create` (dtype, engine, cache_bytes, replace, ...).

        A store's rows are fixed at its creation, and a hash does not split IDs exactly evenly:
        each rank's store holds ``capacity / world`` rows plus six standard deviations of a
        uniform split (``capacity_per_rank`` overrides that)."""
        rank, world = _dist.get_rank(group), _dist.get_world_size(group)
        if capacity_per_rank is None:
            share = capacity / world
            capacity_per_rank = int(share + 6 * (share * (1 - 1 / world)) ** 0.5 + 64)
        store = EmbeddingStore.create(cls.shard_pool(pool, rank, world), dim, capacity=capacity_per_rank, **store_options)
        return cls(store, group)

    @classmethod
    def open(cls, pool, *, group=None, **store_options):
        """Opens this rank's shard; the world size must be the one the table was created with
        (its shards' names hold it, so another world size finds no store: gphash.Error NotFound)."""
        rank, world = _dist.get_rank(group), _dist.get_world_size(group)
        return cls(EmbeddingStore.open(cls.shard_pool(pool, rank, world), **store_options), group)

    @property
    def dim(self):
        return self.store.dim

    def close(self):
        self.store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- the exchange -----------------------------------------------------------------------

    def _to_comm(self, x):
        return x.to(self._comm_device) if x.device != self._comm_device else x

    def _all_to_all(self, send, send_counts, recv_counts):
        """Rows of `send` (grouped by destination rank, send_counts[r] for rank r) to their ranks;
        returns what this rank receives, grouped by source rank."""
        recv = _torch.empty((int(recv_counts.sum()),) + tuple(send.shape[1:]), dtype=send.dtype, device=send.device)
        _dist.all_to_all_single(recv, send, output_split_sizes=recv_counts.tolist(),
                                input_split_sizes=send_counts.tolist(), group=self.group)
        return recv

    def _route(self, ids):
        """Groups `ids` by owner; returns (order, ids grouped by owner, send counts, receive counts)."""
        owners = owner_of(ids, self.world)
        order = _torch.argsort(owners, stable=True)
        send_counts = _torch.bincount(owners, minlength=self.world).to(_torch.int64)
        recv_counts = _torch.empty_like(send_counts)
        _dist.all_to_all_single(recv_counts, send_counts, group=self.group)
        return order, ids[order], send_counts.cpu(), recv_counts.cpu()

    # ---- operations (collectives) ---------------------------------------------------------

    def insert_or_assign(self, ids, rows):
        """Writes rows: each goes to the rank that owns its ID."""
        ids = self._to_comm(_torch.as_tensor(ids).to(_torch.int64).reshape(-1))
        rows = self._to_comm(_torch.as_tensor(rows))
        if rows.shape != (len(ids), self.dim):
            raise _error(f"rows must be [{len(ids)}, {self.dim}], not {list(rows.shape)}", "rows")
        order, grouped, send_counts, recv_counts = self._route(ids)
        mine = self._all_to_all(grouped, send_counts, recv_counts)
        my_rows = self._all_to_all(rows[order].contiguous(), send_counts, recv_counts)
        if len(mine):
            self.store.insert_or_assign(mine.cpu(), my_rows.cpu())

    def lookup(self, ids, offsets=None, pooling="sum", include_last_offset=False):
        """Rows of int64 ``ids`` in their order ([len(ids), dim]); missing IDs get the store's
        default row. With ``offsets`` (bags, as torch.nn.EmbeddingBag) the rows of each bag are
        pooled ("sum" or "mean") after they are gathered. Returns a tensor on ids' device."""
        ids_t = _torch.as_tensor(ids).to(_torch.int64)
        out_device = ids_t.device
        ids_c = self._to_comm(ids_t.reshape(-1))
        order, grouped, send_counts, recv_counts = self._route(ids_c)
        mine = self._all_to_all(grouped, send_counts, recv_counts)
        if len(mine):
            local = mine if self._gpu_lookups else mine.cpu()
            my_rows = self._to_comm(self.store.lookup(local, pooling=None))
        else:
            my_rows = _torch.empty((0, self.dim), dtype=self._row_dtype(), device=self._comm_device)
        back = self._all_to_all(my_rows.contiguous(), recv_counts, send_counts)
        rows = _torch.empty_like(back)
        rows[order] = back  # to where each ID was
        if offsets is not None:
            rows = self._pool(rows, _torch.as_tensor(offsets).to(_torch.int64).to(rows.device), pooling,
                              include_last_offset)
        return rows.to(out_device)

    def size(self):
        """Rows in the whole table (a collective: an all-reduce)."""
        n = _torch.tensor([len(self.store)], dtype=_torch.int64, device=self._comm_device)
        _dist.all_reduce(n, group=self.group)
        return int(n.item())

    # ---- helpers --------------------------------------------------------------------------

    def _row_dtype(self):
        return {"float32": _torch.float32, "float16": _torch.float16, "bfloat16": _torch.bfloat16}[self.store.dtype]

    @staticmethod
    def _pool(rows, offsets, pooling, include_last_offset):
        if pooling not in ("sum", "mean"):
            raise _error(f"pooling must be 'sum' or 'mean' with offsets, not {pooling!r}", "pooling")
        n = len(rows)
        bounds = offsets if include_last_offset else _torch.cat([offsets, _torch.tensor([n], device=offsets.device)])
        bags = len(bounds) - 1
        sizes = (bounds[1:] - bounds[:-1]).clamp(min=0)
        bag_of = _torch.repeat_interleave(_torch.arange(bags, device=rows.device), sizes)
        out = _torch.zeros((bags, rows.shape[1]), dtype=_torch.float32, device=rows.device)
        out.index_add_(0, bag_of, rows[: len(bag_of)].float())
        if pooling == "mean":
            out /= sizes.clamp(min=1).unsqueeze(1).float()
        return out.to(rows.dtype)

"""gphash.torch: PyTorch modules over gphash.

``EmbeddingBag`` is shaped like ``torch.nn.EmbeddingBag`` (``forward(input, offsets)``, modes
"sum" and "mean", ``include_last_offset``) for inference: its rows live in a gphash
EmbeddingStore (host memory, persistent, with a GPU cache of hot rows) instead of a GPU
parameter. CUDA inputs are looked up on the GPU on the current stream; CPU inputs on the CPU.
It has no gradients (inference only): use it under ``torch.no_grad()`` or ``torch.inference_mode()``.
"""
from __future__ import annotations

import torch as _torch

from . import EmbeddingStore, _error

__all__ = ["EmbeddingBag"]


class EmbeddingBag(_torch.nn.Module):
    """``torch.nn.EmbeddingBag`` backed by a gphash EmbeddingStore.

    Args:
        num_embeddings: rows the store can hold (its capacity); IDs are any int64 but -1 and -2.
        embedding_dim: 1..1024.
        mode: "sum" or "mean" ("max" is not supported).
        pool: where the store lives ("NAME" = /dev/shm/NAME); an existing store is opened when
            ``create`` is False.
        dtype: torch.float32, torch.float16 or torch.bfloat16.
        engine: "gpu" (lookups of CUDA tensors on the GPU) or "cpu".
        cache_bytes: GPU memory for the cache of hot rows (GPU engine).
        store: an open EmbeddingStore to use instead of pool/num_embeddings/dtype.
    """

    def __init__(self, num_embeddings=None, embedding_dim=None, mode="mean", *, pool=None, dtype=_torch.float32,
                 engine="gpu", cache_bytes=0, include_last_offset=False, padding_idx=None,
                 create=True, replace=False, store=None, default_value=0.0):
        super().__init__()
        if mode not in ("sum", "mean"):
            raise _error(f"mode must be 'sum' or 'mean' (gphash has no 'max'), not {mode!r}", "mode")
        if padding_idx is not None:
            raise _error("padding_idx is not supported: erase that id instead (missing ids get the default row)",
                         "padding_idx")
        if store is None:
            if pool is None:
                raise _error("EmbeddingBag needs a pool (or an open store)", "pool")
            if create:
                store = EmbeddingStore.create(pool, embedding_dim, dtype=str(dtype).replace("torch.", ""),
                                              capacity=num_embeddings, engine=engine, cache_bytes=cache_bytes,
                                              replace=replace, default_value=default_value)
            else:
                store = EmbeddingStore.open(pool, engine=engine, cache_bytes=cache_bytes)
        self.store = store
        self.mode = mode
        self.include_last_offset = include_last_offset
        self.embedding_dim = store.dim
        self.num_embeddings = num_embeddings

    @classmethod
    def from_pretrained(cls, embeddings, mode="mean", *, pool, engine="gpu", cache_bytes=0, chunk=1 << 20, **kw):
        """Creates a store from a [num, dim] tensor: row i of ``embeddings`` becomes ID i."""
        num, dim = embeddings.shape
        bag = cls(num, dim, mode, pool=pool, dtype=embeddings.dtype, engine=engine, cache_bytes=cache_bytes, **kw)
        weights = embeddings.detach().cpu().contiguous()
        for start in range(0, num, chunk):
            ids = _torch.arange(start, min(start + chunk, num), dtype=_torch.int64)
            bag.store.insert_or_assign(ids, weights[start:start + len(ids)])
        return bag

    def forward(self, input, offsets=None, per_sample_weights=None):
        if per_sample_weights is not None:
            raise _error("per_sample_weights is not supported", "per_sample_weights")
        if input.dtype != _torch.int64:
            raise _error(f"input must be int64 ids, not {input.dtype}", "ids")
        if input.dim() == 2:
            if offsets is not None:
                raise _error("offsets must be None when input is 2-D, as in torch.nn.EmbeddingBag", "offsets")
            return self.store.lookup(input, pooling=self.mode)
        if offsets is None:
            raise _error("1-D input needs offsets", "offsets")
        if offsets.device != input.device:
            raise _error("offsets must be on the same device as input", "offsets")
        return self.store.lookup(input, offsets.to(_torch.int64), pooling=self.mode,
                                 include_last_offset=self.include_last_offset)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}, dtype={self.store.dtype}"

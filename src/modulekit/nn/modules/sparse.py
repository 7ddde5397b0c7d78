"""``Embedding``: a lookup table gathered by a bounds-checked C kernel."""

from __future__ import annotations

import numpy as np

from modulekit._ext import _ops
from modulekit._ext._tensor import Parameter
from modulekit.device import as_device
from modulekit.dtypes import as_dtype, float32
from modulekit.module import Module
from modulekit.nn._input import as_indices
from modulekit.nn._random import default_generator

__all__ = ["Embedding"]


class Embedding(Module):
    """Rows of ``weight`` (``num_embeddings x embedding_dim``) picked by integer indices, as
    ``torch.nn.Embedding``.

    Parameters
    ----------
    num_embeddings, embedding_dim : int
        Table size.
    padding_idx : int, optional
        Row initialised to zeros (negative values count from the end, as in torch).
    max_norm, norm_type : float, optional
        As torch: each forward first rescales, in place, every looked-up row of ``weight``
        whose ``norm_type``-norm exceeds ``max_norm`` to norm ``max_norm``.
    scale_grad_by_freq, sparse :
        No effect without autograd; kept for signature compatibility.
    _weight : array_like, optional
        Initial weight of shape ``(num_embeddings, embedding_dim)``.
    _freeze : bool
        Ignored (there are no gradients).
    device, dtype :
        CPU only; floating storage dtype (default float32). float16/bfloat16 tables are widened
        to float32 as rows are gathered.

    Notes
    -----
    ``forward(input)`` takes integer indices of any shape and returns an array of shape
    ``input.shape + (embedding_dim,)``: float64 for a float64 table, else float32. Every index
    is checked against ``num_embeddings`` before any row is read: an out-of-range index raises
    ``IndexError`` naming it and its position.
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight=None,
        _freeze: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        for name, value in (("num_embeddings", num_embeddings), ("embedding_dim", embedding_dim)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"Embedding: {name} must be a non-negative int, got {value!r}")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(
                    f"Embedding: padding_idx must be within [{-num_embeddings}, "
                    f"{num_embeddings}), got {padding_idx}"
                )
            padding_idx = int(padding_idx) % num_embeddings
        if device is not None:
            as_device(device)
        dtype = float32 if dtype is None else as_dtype(dtype)
        if not dtype.is_floating:
            raise TypeError(f"Embedding: dtype must be a floating type, got {dtype.name}")
        self.num_embeddings = int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        self.padding_idx = padding_idx
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.sparse = sparse
        shape = (self.num_embeddings, self.embedding_dim)
        if _weight is None:
            w = default_generator().standard_normal(shape)
            if padding_idx is not None:
                w[padding_idx] = 0.0
        else:
            w = np.asarray(_weight)
            if w.shape != shape:
                raise ValueError(f"Embedding: _weight must have shape {shape}, got {w.shape}")
        self.weight = Parameter(np.asarray(w).astype(dtype.numpy))

    @classmethod
    def from_pretrained(
        cls, embeddings, freeze: bool = True, padding_idx: int | None = None, **kwargs
    ) -> Embedding:
        """An Embedding whose table is a copy of the 2-D ``embeddings`` (dtype kept)."""
        w = np.asarray(embeddings)
        if w.ndim != 2:
            raise ValueError(f"Embedding.from_pretrained: embeddings must be 2-D, got {w.shape}")
        dtype = kwargs.pop("dtype", None) or (w.dtype if w.dtype.kind == "f" else None)
        return cls(w.shape[0], w.shape[1], padding_idx, _weight=w, dtype=dtype, **kwargs)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        return s

    def forward(self, input) -> np.ndarray:
        ids = as_indices(input, f"Embedding({self.extra_repr()})")
        if self.max_norm is not None:
            from modulekit.nn._functional_misc import embedding_renorm_

            w = self.weight.numpy()
            ok = ids.astype(np.int64, copy=False)
            ok = ok[(ok >= 0) & (ok < self.num_embeddings)]  # bad ones raise below
            embedding_renorm_(w, ok, self.max_norm, self.norm_type)
        try:
            return _ops.embedding(ids, self.weight.numpy())
        except IndexError as exc:
            raise IndexError(f"Embedding({self.extra_repr()}): {exc}") from None
        except TypeError as exc:
            raise TypeError(f"Embedding({self.extra_repr()}): {exc}") from None

"""``EmbeddingBag``, ``Bilinear``, ``CosineSimilarity``, ``PairwiseDistance``, the dropout
variants, ``ParameterList`` and ``ParameterDict``: torch names,
constructor signatures and state-dict keys."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Iterator, Mapping

import numpy as np

from modulekit._ext._tensor import Parameter, Tensor
from modulekit.device import as_device
from modulekit.dtypes import as_dtype, float32
from modulekit.module import Module, _bump_epoch
from modulekit.nn import _functional_misc as FM
from modulekit.nn._input import as_input
from modulekit.nn._random import default_generator

__all__ = [
    "AlphaDropout",
    "Bilinear",
    "CosineSimilarity",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "EmbeddingBag",
    "FeatureAlphaDropout",
    "PairwiseDistance",
    "ParameterDict",
    "ParameterList",
]


def _float_dtype(dtype, name: str):
    dtype = float32 if dtype is None else as_dtype(dtype)
    if not dtype.is_floating:
        raise TypeError(f"{name}: dtype must be a floating type, got {dtype.name}")
    return dtype


def _count(value, what: str, name: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name}: {what} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _rethrow(name: str, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (ValueError, TypeError, IndexError) as exc:
        raise type(exc)(f"{name}: {exc}") from None


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of embedding rows, as ``torch.nn.EmbeddingBag``.

    ``forward(input, offsets=None, per_sample_weights=None)``: a 2-D input (B, L) is B bags of
    L indices; a 1-D input is cut into bags at ``offsets``. ``per_sample_weights`` scales each
    row (``mode='sum'``); indices equal to ``padding_idx`` are left out; an empty bag gives
    zeros. ``max_norm`` rescales, in place, each looked-up row whose norm exceeds it (as
    torch). The output is (B, embedding_dim), float64 for a float64 table, else float32.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: float | None = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                 sparse: bool = False, _weight=None, include_last_offset: bool = False,
                 padding_idx: int | None = None, device=None, dtype=None) -> None:
        super().__init__()
        n = _count(num_embeddings, "num_embeddings", "EmbeddingBag")
        d = _count(embedding_dim, "embedding_dim", "EmbeddingBag")
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"EmbeddingBag: mode must be 'sum', 'mean' or 'max', got {mode!r}")
        if padding_idx is not None:
            if not -n <= padding_idx < n:
                raise ValueError(f"EmbeddingBag: padding_idx must be within [{-n}, {n}), got "
                                 f"{padding_idx}")
            padding_idx = int(padding_idx) % n
        if device is not None:
            as_device(device)
        dtype = _float_dtype(dtype, "EmbeddingBag")
        self.num_embeddings, self.embedding_dim = n, d
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.mode, self.sparse = scale_grad_by_freq, mode, sparse
        self.include_last_offset, self.padding_idx = include_last_offset, padding_idx
        if _weight is None:
            w = default_generator().standard_normal((n, d))
            if padding_idx is not None:
                w[padding_idx] = 0.0
        else:
            w = np.asarray(_weight)
            if w.shape != (n, d):
                raise ValueError(f"EmbeddingBag: _weight must have shape {(n, d)}, got "
                                 f"{w.shape}")
        self.weight = Parameter(np.asarray(w).astype(dtype.numpy))

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, max_norm=None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        mode: str = "mean", sparse: bool = False,
                        include_last_offset: bool = False,
                        padding_idx: int | None = None) -> EmbeddingBag:
        """An EmbeddingBag whose table is a copy of the 2-D ``embeddings`` (dtype kept)."""
        w = np.asarray(embeddings)
        if w.ndim != 2:
            raise ValueError(f"EmbeddingBag.from_pretrained: embeddings must be 2-D, got "
                             f"{w.shape}")
        return cls(w.shape[0], w.shape[1], max_norm, norm_type, scale_grad_by_freq, mode,
                   sparse, w, include_last_offset, padding_idx,
                   dtype=w.dtype if w.dtype.kind == "f" else None)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        s += f", mode={self.mode!r}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s

    def forward(self, input, offsets=None, per_sample_weights=None) -> np.ndarray:
        return _rethrow(f"EmbeddingBag({self.extra_repr()})", FM.embedding_bag, input,
                        self.weight, offsets, self.max_norm, self.norm_type,
                        self.scale_grad_by_freq, self.mode, self.sparse, per_sample_weights,
                        self.include_last_offset, self.padding_idx)


class Bilinear(Module):
    """``y = x1^T A x2 + b`` with ``weight`` (out_features, in1_features, in2_features), as
    ``torch.nn.Bilinear`` (initialised ``U(-1/sqrt(in1), 1/sqrt(in1))`` from the library's
    generator)."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int,
                 bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        i1 = _count(in1_features, "in1_features", "Bilinear", 1)
        i2 = _count(in2_features, "in2_features", "Bilinear", 1)
        o = _count(out_features, "out_features", "Bilinear", 1)
        if device is not None:
            as_device(device)
        dtype = _float_dtype(dtype, "Bilinear")
        self.in1_features, self.in2_features, self.out_features = i1, i2, o
        bound = 1.0 / math.sqrt(i1)
        g = default_generator()
        self.weight = Parameter(g.uniform(-bound, bound, (o, i1, i2)).astype(dtype.numpy))
        if bias:
            self.bias = Parameter(g.uniform(-bound, bound, o).astype(dtype.numpy))
        else:
            self.register_parameter("bias", None)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")

    def forward(self, input1, input2) -> np.ndarray:
        return _rethrow("Bilinear", FM.bilinear, input1, input2, self.weight.numpy(),
                        None if self.bias is None else self.bias.numpy())


class CosineSimilarity(Module):
    """Cosine similarity of ``x1`` and ``x2`` along ``dim``, as
    ``torch.nn.CosineSimilarity``."""

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def extra_repr(self) -> str:
        return f"dim={self.dim}, eps={self.eps}"

    def forward(self, x1, x2) -> np.ndarray:
        return _rethrow("CosineSimilarity", FM.cosine_similarity, x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """``||x1 - x2 + eps||_p`` along the last dimension, as ``torch.nn.PairwiseDistance``."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def extra_repr(self) -> str:
        return f"p={self.norm}, eps={self.eps}, keepdim={self.keepdim}"

    def forward(self, x1, x2) -> np.ndarray:
        return _rethrow("PairwiseDistance", FM.pairwise_distance, x1, x2, self.norm, self.eps,
                        self.keepdim)


class _DropoutNd(Module):
    _fn = None

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not isinstance(p, numbers.Real) or not 0.0 <= p <= 1.0:
            raise ValueError(f"{type(self).__name__}: dropout probability has to be between 0 "
                             f"and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"

    def forward(self, input):
        x = as_input(input, type(self).__name__)
        return _rethrow(type(self).__name__, type(self)._fn, x, self.p, self.training,
                        self.inplace)


class Dropout1d(_DropoutNd):
    """Channel-wise dropout of an (N, C, L) or (C, L) input in training, as
    ``torch.nn.Dropout1d`` (the library's generator); identity in eval mode."""

    _fn = staticmethod(FM.dropout1d)


class Dropout2d(_DropoutNd):
    """Channel-wise dropout of an (N, C, H, W) input in training, as ``torch.nn.Dropout2d``;
    identity in eval mode."""

    _fn = staticmethod(FM.dropout2d)


class Dropout3d(_DropoutNd):
    """Channel-wise dropout of an (N, C, D, H, W) or (C, D, H, W) input in training, as
    ``torch.nn.Dropout3d``; identity in eval mode."""

    _fn = staticmethod(FM.dropout3d)


class AlphaDropout(_DropoutNd):
    """Alpha dropout (keeps SELU's self-normalisation) in training, as
    ``torch.nn.AlphaDropout``; identity in eval mode."""

    _fn = staticmethod(FM.alpha_dropout)


class FeatureAlphaDropout(_DropoutNd):
    """Channel-wise alpha dropout of an (N, C, *) input in training, as
    ``torch.nn.FeatureAlphaDropout``; identity in eval mode."""

    _fn = staticmethod(FM.feature_alpha_dropout)


def _as_parameter(value, name: str) -> Parameter:
    if isinstance(value, Parameter):
        return value
    if isinstance(value, Tensor):
        return Parameter(value)
    arr = np.asarray(value)
    if arr.dtype.kind not in "fiub":
        raise TypeError(f"{name}: a parameter must hold real numbers, got dtype {arr.dtype}")
    return Parameter(Tensor(np.array(arr, order="C")))


class ParameterList(Module):
    """A list of parameters registered as "0", "1", ..., as ``torch.nn.ParameterList``
    (arrays and Tensors are wrapped in :class:`~modulekit.Parameter`)."""

    def __init__(self, values: Iterable | None = None) -> None:
        super().__init__()
        if values is not None:
            self.extend(values)

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[Parameter]:
        return iter(self._parameters.values())

    def _index(self, idx: int) -> str:
        n = len(self)
        if not isinstance(idx, numbers.Integral) or not -n <= idx < n:
            raise IndexError(f"ParameterList: index {idx} is out of range for {n} parameters")
        return str(int(idx) % n)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ParameterList(list(self._parameters.values())[idx])
        return self._parameters[self._index(idx)]

    def __setitem__(self, idx, value) -> None:
        key = self._index(idx)
        self.register_parameter(key, _as_parameter(value, "ParameterList"))

    def __iadd__(self, values: Iterable) -> ParameterList:
        return self.extend(values)

    def __dir__(self) -> list[str]:
        return [key for key in super().__dir__() if not key.isdigit()]

    def append(self, value) -> ParameterList:
        """Append ``value`` (wrapped in a Parameter when needed); return self."""
        self.register_parameter(str(len(self)), _as_parameter(value, "ParameterList"))
        return self

    def extend(self, values: Iterable) -> ParameterList:
        """Append every value of ``values``; return self."""
        if not isinstance(values, Iterable) or isinstance(values, (str, bytes)):
            raise TypeError(f"ParameterList.extend should be called with an iterable, but got "
                            f"{type(values).__name__}")
        for v in list(values):
            self.append(v)
        return self

    def extra_repr(self) -> str:
        return "\n".join(f"  ({i}): Parameter containing: [{p.dtype.name} of size "
                         f"{'x'.join(map(str, p.shape))}]" for i, p in enumerate(self))

    def forward(self, *args, **kwargs):
        raise RuntimeError("ParameterList is a container of parameters and has no forward")


class ParameterDict(Module):
    """An ordered dict of parameters registered under their keys, as
    ``torch.nn.ParameterDict`` (arrays and Tensors are wrapped in Parameters)."""

    def __init__(self, parameters: Mapping | Iterable | None = None) -> None:
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key: str) -> Parameter:
        return self._parameters[key]

    def __setitem__(self, key: str, value) -> None:
        self.register_parameter(key, _as_parameter(value, "ParameterDict"))

    def __delitem__(self, key: str) -> None:
        _bump_epoch()
        del self._parameters[key]

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[str]:
        return iter(self._parameters)

    def __contains__(self, key) -> bool:
        return key in self._parameters

    def keys(self):
        """The keys, in insertion order."""
        return self._parameters.keys()

    def values(self):
        """The parameters, in insertion order."""
        return self._parameters.values()

    def items(self):
        """(key, parameter) pairs, in insertion order."""
        return self._parameters.items()

    def get(self, key: str, default=None):
        """The parameter under ``key``, or ``default``."""
        return self._parameters.get(key, default)

    def pop(self, key: str) -> Parameter:
        """Remove ``key`` and return its parameter."""
        value = self[key]
        del self[key]
        return value

    def clear(self) -> None:
        """Remove every entry."""
        _bump_epoch()
        self._parameters.clear()

    def setdefault(self, key: str, default=None) -> Parameter:
        """The parameter under ``key``, after filing ``default`` there if it was absent."""
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, parameters: Mapping | Iterable) -> None:
        """File every (key, value) of a mapping or an iterable of pairs."""
        items = parameters.items() if isinstance(parameters, Mapping) else parameters
        for entry in items:
            if not isinstance(entry, (tuple, list)) or len(entry) != 2:
                raise ValueError(f"ParameterDict.update: expected (key, value) pairs, got "
                                 f"{entry!r}")
            self[entry[0]] = entry[1]

    def extra_repr(self) -> str:
        return "\n".join(f"  ({k}): Parameter containing: [{p.dtype.name} of size "
                         f"{'x'.join(map(str, p.shape))}]" for k, p in self.items())

    def forward(self, *args, **kwargs):
        raise RuntimeError("ParameterDict is a container of parameters and has no forward")

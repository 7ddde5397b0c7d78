"""Where layers get their packed weight kernels: ``pack_linear``.

``pack_linear`` comes from the packed GEMM engine ``modulekit._ext._gemm`` when it is built;
until then a NumPy stand-in with exactly its interface is used. This is the ONE place that
chooses (``USING_STAND_IN`` says which).
"""

from __future__ import annotations

import numpy as np

from modulekit.dtypes import as_dtype

__all__ = ["pack_linear", "PackedLinearStandIn", "USING_STAND_IN"]

_STORAGES = ("float32", "float64", "float16", "bfloat16")


class PackedLinearStandIn:
    """NumPy stand-in for ``modulekit._ext._gemm.PackedLinear``.

    Keeps the weight transposed, contiguous, in the storage dtype (float16/bfloat16 storage is
    weight-only: widened to float32 at each forward); the bias is kept in the compute dtype.
    """

    __slots__ = (
        "in_features",
        "out_features",
        "storage",
        "compute_dtype",
        "has_bias",
        "_wt",
        "_bias",
        "_bias_dtype",
    )

    def __init__(self, weight, bias, storage: str):
        if storage not in _STORAGES:
            raise ValueError(f"pack_linear: storage must be one of {_STORAGES}, got {storage!r}")
        w = np.asarray(weight)
        if w.ndim != 2:
            raise ValueError(f"pack_linear: weight must be 2-D (N, K), got shape {w.shape}")
        n, k = w.shape
        self.in_features, self.out_features, self.storage = k, n, storage
        self.compute_dtype = np.dtype(np.float64 if storage == "float64" else np.float32)
        self._wt = np.ascontiguousarray(w.astype(as_dtype(storage).numpy, copy=False).T)
        self.has_bias = bias is not None
        if bias is not None:
            b = np.asarray(bias)
            if b.shape != (n,):
                raise ValueError(f"pack_linear: bias must have shape ({n},), got {b.shape}")
            self._bias_dtype = b.dtype
            self._bias = b.astype(self.compute_dtype)
        else:
            self._bias, self._bias_dtype = None, None

    @property
    def nbytes(self) -> int:
        return self._wt.nbytes + (0 if self._bias is None else self._bias.nbytes)

    def forward(self, x, activation="none", alpha=0.0, beta=0.0, out=None):
        from modulekit.nn import functional as F

        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.in_features:
            raise ValueError(
                f"PackedLinear.forward: expected x of shape (M, {self.in_features}), got {x.shape}"
            )
        x = x.astype(self.compute_dtype, copy=False)
        wt = self._wt if self._wt.dtype == self.compute_dtype else self._wt.astype(np.float32)
        y = np.matmul(x, wt, out=out)
        if self._bias is not None:
            y += self._bias
        if activation == "none":
            return y
        acts = {
            "relu": F.relu,
            "gelu": F.gelu,
            "silu": F.silu,
            "sigmoid": F.sigmoid,
            "tanh": F.tanh,
            "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"),
            "clamp": lambda v: np.clip(v, alpha, beta),
        }
        if activation not in acts:
            raise ValueError(f"PackedLinear.forward: unknown activation {activation!r}")
        y[...] = acts[activation](y)
        return y

    def unpack(self):
        w = np.ascontiguousarray(self._wt.T)
        b = None if self._bias is None else self._bias.astype(self._bias_dtype)
        return w, b


try:
    from modulekit._ext._gemm import pack_linear

    USING_STAND_IN = False
except ImportError:
    USING_STAND_IN = True

    def pack_linear(weight, bias, storage: str) -> PackedLinearStandIn:
        """Pack ``weight`` (N, K) and ``bias`` (N,) or None in ``storage`` dtype."""
        return PackedLinearStandIn(weight, bias, storage)

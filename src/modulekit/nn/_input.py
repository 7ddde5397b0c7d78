"""The one input check every layer, ``nn.functional`` op and model runs on its data.

:func:`as_input` turns a layer's input into an ndarray the kernels can read: real numbers in
native byte order. :func:`as_indices` does the same for integer indices (``Embedding``, BERT's
token ids). Both accept any array-like (ndarray, :class:`~modulekit.Tensor`, a torch CPU
tensor, an object with the buffer protocol or ``__array__``, nested sequences).

The rules (``docs/api.md``, "Inputs"):

- accepted: float32, float64, float16, bfloat16, every integer dtype and bool (the layers
  compute in float32, or float64 for float64 inputs / layers);
- non-native byte order (``'>f4'`` on a little-endian machine): converted to the same values in
  native order (one copy); the C kernels read native words only and refuse anything else;
- complex, object, string, bytes, datetime, timedelta and structured arrays: ``TypeError``
  naming the layer, the dtype it got and what it accepts.

The hot path, a native float32/float64 ndarray, is one type check and one identity test on
its dtype: no copy, no conversion.
"""

from __future__ import annotations

import numpy as np

from modulekit._ext._tensor import as_array
from modulekit.dtypes import is_bfloat16

__all__ = ["ACCEPTED", "as_indices", "as_input"]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)

ACCEPTED = "real numbers (float32, float64, float16, bfloat16, integer or bool)"

_KIND_NAMES = {
    "c": "complex numbers",
    "O": "Python objects",
    "U": "strings",
    "S": "bytes",
    "M": "datetimes",
    "m": "timedeltas",
    "V": "structured records",
}


def _to_ndarray(x, what: str) -> np.ndarray:
    try:
        return as_array(x)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what}: {exc}; expected an array of {ACCEPTED}") from None


def _refuse(dt: np.dtype, what: str, accepted: str) -> TypeError:
    kind = _KIND_NAMES.get(dt.kind, f"dtype kind {dt.kind!r}")
    return TypeError(f"{what}: got an array of {kind} (dtype {dt}); expected {accepted}")


def as_input(x, what: str) -> np.ndarray:
    """``x`` as an ndarray of real numbers in native byte order, for the layer or op ``what``.

    Parameters
    ----------
    x : array_like
        The input.
    what : str
        Names the caller in errors ("Linear", "conv2d", ...).

    Returns
    -------
    ndarray
        ``x`` itself when it is an ndarray of an accepted dtype in native byte order; a view
        of a Tensor's / buffer's memory; a native-order copy of a byte-swapped array. Its
        dtype is not changed (the caller casts to its compute dtype).

    Raises
    ------
    TypeError
        ``x`` is not array-like, or holds complex numbers, objects, strings, bytes, dates or
        records.
    """
    arr = x if type(x) is np.ndarray else _to_ndarray(x, what)
    dt = arr.dtype
    if dt is _F32 or dt is _F64:  # the hot path
        return arr
    kind = dt.kind
    if kind in "fiub":
        return arr if dt.isnative else arr.astype(dt.newbyteorder("="))
    if is_bfloat16(dt):
        return arr
    raise _refuse(dt, what, ACCEPTED)


def as_indices(x, what: str) -> np.ndarray:
    """``x`` as an ndarray of integer indices in native byte order (shape kept, 0-d too).

    Any signed or unsigned integer dtype is accepted; bool, floating, complex, object and
    string arrays raise ``TypeError`` naming ``what`` (torch refuses float and bool indices
    too). Range checks are the caller's (the embedding kernel checks every index against its
    table before reading a row and raises ``IndexError``)."""
    arr = x if type(x) is np.ndarray else _to_ndarray(x, what)
    dt = arr.dtype
    if dt.kind in "iu":
        return arr if dt.isnative else arr.astype(dt.newbyteorder("="))
    if (dt.kind in "fb" or is_bfloat16(dt)) and arr.size == 0:
        return arr.astype(np.int64)  # an empty list (NumPy makes it float64): no index at all
    if dt.kind == "f" or is_bfloat16(dt):
        raise TypeError(
            f"{what}: indices must be integers, got an array of floating numbers (dtype {dt})"
        )
    if dt.kind == "b":
        raise TypeError(f"{what}: indices must be integers, got an array of bools (dtype {dt})")
    raise _refuse(dt, what, "integers")

"""Data types of modulekit tensors, and their NumPy equivalents.

NumPy has no bfloat16; ``ml_dtypes.bfloat16`` is its NumPy dtype. Importing ml_dtypes costs
about half a second, so it is imported the first time a bfloat16 NumPy dtype is actually
needed (``modulekit.bfloat16.numpy``, a bfloat16 tensor's array, a cast, a checkpoint holding
bfloat16...), never by ``import modulekit``: :func:`bfloat16_numpy` is that one place.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "DataType",
    "float32",
    "float64",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "int8",
    "uint8",
    "bool_",
    "as_dtype",
    "bfloat16_numpy",
    "is_bfloat16",
]


class DataType:
    """A tensor element type: a name, a NumPy dtype and whether it is floating point.

    Instances are singletons (``modulekit.float32`` ...); compare them with ``is`` or ``==``.
    ``DataType(x)`` resolves a DataType, a name such as ``"float16"`` (torch's aliases
    ``"half"``, ``"float"``, ``"double"``, ``"long"``, ``"int"`` and ``"bool"`` too) or a NumPy
    dtype, and refuses anything else with a ``TypeError`` naming what it got.

    ``bfloat16.numpy`` is resolved on first access (it imports ml_dtypes, see
    :func:`bfloat16_numpy`); the other types' ``numpy`` are plain slots.
    """

    __slots__ = ("name", "numpy", "is_floating", "itemsize")
    _by_name: dict[str, DataType] = {}
    _by_numpy: dict[np.dtype, DataType] = {}

    def __new__(cls, value):
        return as_dtype(value)

    @classmethod
    def _define(cls, name, np_dtype, is_floating, aliases=(), itemsize=None):
        self = object.__new__(cls)
        self.name = name
        self.is_floating = is_floating
        if np_dtype is None:        # resolved on first use (__getattr__, bfloat16_numpy)
            self.itemsize = itemsize
        else:
            self.numpy = np.dtype(np_dtype)
            self.itemsize = self.numpy.itemsize
            cls._by_numpy[self.numpy] = self
        for key in (name, *aliases):
            cls._by_name[key] = self
        return self

    def __getattr__(self, attr):
        # Only reached for a slot never set: bfloat16's ``numpy`` before its first use.
        if attr == "numpy" and self.name == "bfloat16":
            return bfloat16_numpy()
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")

    def __repr__(self):
        return f"modulekit.{self.name}"

    def __reduce__(self):
        return (as_dtype, (self.name,))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


float32 = DataType._define("float32", np.float32, True, ("float",))
float64 = DataType._define("float64", np.float64, True, ("double",))
float16 = DataType._define("float16", np.float16, True, ("half",))
bfloat16 = DataType._define("bfloat16", None, True, itemsize=2)
int64 = DataType._define("int64", np.int64, False, ("long",))
int32 = DataType._define("int32", np.int32, False, ("int",))
int8 = DataType._define("int8", np.int8, False)
uint8 = DataType._define("uint8", np.uint8, False)
bool_ = DataType._define("bool", np.bool_, False, ("bool_",))


_bf16_numpy = None     # set by bfloat16_numpy()


def bfloat16_numpy() -> np.dtype:
    """The NumPy dtype of bfloat16 (``ml_dtypes.bfloat16``), importing ml_dtypes on first use.

    Also makes ``DataType(that dtype)`` and ``modulekit.bfloat16.numpy`` plain look-ups from
    then on. Raises ``ImportError`` naming the package when ml_dtypes is not installed.
    """
    global _bf16_numpy
    dt = _bf16_numpy
    if dt is not None:
        return dt
    try:
        from ml_dtypes import bfloat16 as scalar_type
    except ImportError as exc:  # pragma: no cover - ml_dtypes is a dependency
        raise ImportError(
            "bfloat16 arrays need the ml_dtypes package (pip install ml_dtypes)"
        ) from exc
    dt = np.dtype(scalar_type)
    bfloat16.numpy = dt
    DataType._by_numpy[dt] = bfloat16
    _bf16_numpy = dt
    return dt


def is_bfloat16(np_dtype) -> bool:
    """Whether NumPy dtype ``np_dtype`` is ml_dtypes' bfloat16.

    Imports nothing unless the dtype is named "bfloat16", which only a loaded ml_dtypes (or a
    package built on it) makes.
    """
    return np_dtype.name == "bfloat16" and np_dtype == bfloat16_numpy()


def as_dtype(value) -> DataType:
    """Resolve ``value`` (DataType, name, NumPy dtype or scalar type) to a :class:`DataType`."""
    if isinstance(value, DataType):
        return value
    if isinstance(value, str):
        key = value[len("modulekit."):] if value.startswith("modulekit.") else value
        key = key[len("torch."):] if key.startswith("torch.") else key
        found = DataType._by_name.get(key)
        if found is None:
            raise TypeError(
                f"unknown data type {value!r}: expected one of "
                f"{', '.join(sorted(DataType._by_name))}"
            )
        return found
    try:
        np_dtype = np.dtype(value)
    except TypeError:
        np_dtype = None
    if np_dtype is not None and value is not None:
        found = DataType._by_numpy.get(np_dtype)
        if found is not None:
            return found
        if is_bfloat16(np_dtype):
            return bfloat16
        raise TypeError(
            f"NumPy dtype {np_dtype} has no modulekit data type: expected one of "
            f"{_NUMPY_NAMES}"
        )
    raise TypeError(
        f"cannot interpret {value!r} (type {type(value).__name__}) as a data type: expected a "
        "modulekit.DataType, a name such as 'float16', or a NumPy dtype"
    )


_NUMPY_NAMES = "float32, float64, float16, bfloat16 (ml_dtypes), int64, int32, int8, uint8, bool"

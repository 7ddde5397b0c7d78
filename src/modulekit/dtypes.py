"""Data types of modulekit tensors, and their NumPy equivalents."""

from __future__ import annotations

import numpy as np
from ml_dtypes import bfloat16 as _np_bfloat16

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
]


class DataType:
    """A tensor element type: a name, a NumPy dtype and whether it is floating point.

    Instances are singletons (``modulekit.float32`` ...); compare them with ``is`` or ``==``.
    ``DataType(x)`` resolves a DataType, a name such as ``"float16"`` (torch's aliases
    ``"half"``, ``"float"``, ``"double"``, ``"long"``, ``"int"`` and ``"bool"`` too) or a NumPy
    dtype, and refuses anything else with a ``TypeError`` naming what it got.
    """

    __slots__ = ("name", "numpy", "is_floating", "itemsize")
    _by_name: dict[str, DataType] = {}
    _by_numpy: dict[np.dtype, DataType] = {}

    def __new__(cls, value):
        return as_dtype(value)

    @classmethod
    def _define(cls, name, np_dtype, is_floating, aliases=()):
        self = object.__new__(cls)
        self.name = name
        self.numpy = np.dtype(np_dtype)
        self.is_floating = is_floating
        self.itemsize = self.numpy.itemsize
        for key in (name, *aliases):
            cls._by_name[key] = self
        cls._by_numpy[self.numpy] = self
        return self

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
bfloat16 = DataType._define("bfloat16", _np_bfloat16, True)
int64 = DataType._define("int64", np.int64, False, ("long",))
int32 = DataType._define("int32", np.int32, False, ("int",))
int8 = DataType._define("int8", np.int8, False)
uint8 = DataType._define("uint8", np.uint8, False)
bool_ = DataType._define("bool", np.bool_, False, ("bool_",))


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
        raise TypeError(
            f"NumPy dtype {np_dtype} has no modulekit data type: expected one of "
            f"{', '.join(str(d) for d in DataType._by_numpy)}"
        )
    raise TypeError(
        f"cannot interpret {value!r} (type {type(value).__name__}) as a data type: expected a "
        "modulekit.DataType, a name such as 'float16', or a NumPy dtype"
    )

"""Reader for ``.npz`` archives (``numpy.savez`` / ``numpy.savez_compressed``).

Each ``<key>.npy`` record is a NumPy ``.npy`` file: magic ``\\x93NUMPY``, version, a header
length, a Python-literal header ``{'descr': ..., 'fortran_order': ..., 'shape': ...}``, then
the data. The header is parsed with :func:`ast.literal_eval` after a length cap (never
``eval``); only the plain little/big-endian dtypes modulekit has are accepted, and object
arrays (which NumPy would unpickle) are refused, as ``numpy.load(allow_pickle=False)`` does.
Stored records are read through the memory map (views when the data happens to be aligned);
compressed ones are inflated with the bounded reader of :mod:`modulekit.checkpoint._zip`.

:func:`write_npz` writes what ``numpy.savez`` writes (stored ``<key>.npy`` records, no pickle).
"""

from __future__ import annotations

import ast
import struct

import numpy as np

from modulekit.checkpoint._common import (
    atomic_write,
    check_shape,
    checked_items,
    fail,
    numel_of,
    saveable_array,
    view_bytes,
)
from modulekit.checkpoint._zip import record_array

__all__ = ["read_npz", "write_npz", "MAX_NPY_HEADER"]

MAX_NPY_HEADER = 65536
_DESCR = {}
for _code, _name in (("f4", "float32"), ("f8", "float64"), ("f2", "float16"), ("i8", "int64"),
                     ("i4", "int32")):
    _DESCR["<" + _code] = np.dtype("<" + _code)
    _DESCR[">" + _code] = np.dtype(">" + _code)
for _code in ("i1", "u1", "b1"):
    _DESCR["|" + _code] = np.dtype(_code)
    _DESCR["<" + _code] = np.dtype(_code)
    _DESCR[">" + _code] = np.dtype(_code)


def _parse_npy(raw, path, where):
    """Return ``(dtype, shape, fortran_order, header_end)`` of the .npy bytes in ``raw``."""
    if raw.size < 10 or raw[:6].tobytes() != b"\x93NUMPY":
        raise fail(path, where, "not a .npy record (bad magic)")
    major = int(raw[6])
    if major == 1:
        (hlen,) = struct.unpack("<H", raw[8:10].tobytes())
        start = 10
    elif major in (2, 3):
        if raw.size < 12:
            raise fail(path, where, "truncated .npy header")
        (hlen,) = struct.unpack("<I", raw[8:12].tobytes())
        start = 12
    else:
        raise fail(path, where, f"unsupported .npy format version {major}")
    if hlen > MAX_NPY_HEADER or start + hlen > raw.size:
        raise fail(path, where, f".npy header of {hlen} bytes is too long or truncated")
    try:
        text = raw[start:start + hlen].tobytes().decode("utf-8" if major == 3 else "latin1")
        header = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError,
            UnicodeDecodeError):
        raise fail(path, where, ".npy header is not a Python literal") from None
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise fail(path, where, ".npy header must have exactly descr, fortran_order, shape")
    descr = header["descr"]
    if not isinstance(descr, str):
        raise fail(path, where, f"structured dtypes are not supported ({type(descr).__name__})")
    if descr.lstrip("<>|=").startswith("O"):
        raise fail(path, where, "object arrays need pickle, which is not allowed "
                                "(allow_pickle=False)")
    dtype = _DESCR.get(descr)
    if dtype is None:
        raise fail(path, where, f"dtype {descr[:40]!r} is not supported by modulekit")
    if type(header["fortran_order"]) is not bool:
        raise fail(path, where, "fortran_order must be a bool")
    shape = check_shape(header["shape"], path, where)
    return dtype, shape, header["fortran_order"], start + hlen


def read_npz(buf, entries):
    """Return ``{key: ndarray}`` for the .npz archive in ``buf`` (``entries`` from the zip)."""
    path = buf.path
    out = {}
    for name, entry in entries.items():
        where = f"record {name!r}"
        if not name.endswith(".npy"):
            raise fail(path, where, "an .npz archive holds only '<key>.npy' records")
        raw = record_array(buf, entry)
        dtype, shape, fortran, hend = _parse_npy(raw, path, where)
        nbytes = numel_of(shape) * dtype.itemsize
        if raw.size - hend != nbytes:
            raise fail(path, where, f"holds {raw.size - hend} data bytes, shape {list(shape)} "
                                    f"of {dtype} needs {nbytes}")
        if fortran:
            arr = view_bytes(raw[hend:], dtype, shape[::-1], path, where).T
            arr = np.ascontiguousarray(arr)
        else:
            arr = view_bytes(raw[hend:], dtype, shape, path, where)
        out[name[:-4]] = arr
    return out


def write_npz(state, path):
    """Write ``state`` (str -> Tensor/ndarray/array-like) to ``path`` as an uncompressed
    ``.npz`` archive that ``numpy.load(path, allow_pickle=False)`` reads: one ``<key>.npy``
    record per key, in the mapping's order, through a temporary file renamed into place.

    NumPy has no bfloat16 dtype (``ml_dtypes.bfloat16`` saves as raw ``V2`` records that
    NumPy gives back as opaque bytes), so bfloat16 values are refused: cast them, or save as
    ``.safetensors`` or ``.pt``.
    """
    import zipfile

    arrays = {}
    for key, value in checked_items(state):
        arr, name = saveable_array(key, value)
        if name == "bfloat16":
            raise TypeError(
                f"state[{key!r}]: bfloat16 cannot be saved as .npz (NumPy has no bfloat16 "
                "dtype, numpy.load would return raw bytes): cast it (e.g. "
                "module.to('float32')) or save as .safetensors or .pt"
            )
        arrays[key] = arr

    def write(f):
        with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
            for key, arr in arrays.items():
                info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_STORED
                with zf.open(info, "w", force_zip64=True) as out:
                    np.lib.format.write_array(out, arr,
                                              allow_pickle=False)

    atomic_write(path, write)


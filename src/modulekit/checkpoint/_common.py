"""Shared pieces of the checkpoint readers: the error type, the file buffer, dtype tables.

Every reader works on a :class:`FileBuffer`: the whole file as one buffer (a private,
copy-on-write memory map, or the bytes read into a uint8 ndarray) plus a ``uint8`` ndarray
over it. Arrays handed to the user are views of that ndarray, so the map stays alive through
their ``.base`` chain for as long as any tensor needs it.
"""

from __future__ import annotations

import mmap as _mmap
import os
import struct

import numpy as np
from ml_dtypes import bfloat16 as _np_bfloat16

__all__ = ["CheckpointError", "FileBuffer", "SUPPORTED_NP_DTYPES"]

# Nothing in a checkpoint may describe more dimensions than NumPy can hold.
MAX_NDIM = 64
# A single dimension must fit in a signed 64-bit integer (numpy's intp on 64-bit hosts).
MAX_DIM = (1 << 63) - 1


class CheckpointError(ValueError):
    """A checkpoint file is corrupt, hostile or in a form modulekit does not read.

    The message names the file, the record or byte offset, and what was wrong.
    """


def fail(path, where, what) -> CheckpointError:
    """Build the one error type with the file, the place in it and the problem."""
    return CheckpointError(f"{path}: {where}: {what}")


# NumPy dtypes modulekit has, by their little-endian NumPy form.
SUPPORTED_NP_DTYPES = {
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
    "float16": np.dtype("<f2"),
    "bfloat16": np.dtype(_np_bfloat16),
    "int64": np.dtype("<i8"),
    "int32": np.dtype("<i4"),
    "int8": np.dtype("i1"),
    "uint8": np.dtype("u1"),
    "bool": np.dtype("?"),
}


class FileBuffer:
    """The bytes of one checkpoint file, memory-mapped or read, with bounds-checked access.

    Parameters
    ----------
    path : str or os.PathLike
        The file. A missing file raises ``FileNotFoundError``.
    use_mmap : bool
        ``True`` maps the file privately (``mmap.ACCESS_COPY``: writable, copy-on-write, the
        file is never modified); ``False`` reads it into a uint8 ndarray.
    """

    __slots__ = ("path", "data", "u8", "size")

    def __init__(self, path, use_mmap=True):
        self.path = os.fspath(path)
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise fail(self.path, "offset 0", "the file is empty")
            if use_mmap:
                try:
                    data = _mmap.mmap(f.fileno(), 0, access=_mmap.ACCESS_COPY)
                except (OSError, ValueError) as exc:
                    raise fail(self.path, "offset 0", f"cannot memory-map the file ({exc})") \
                        from None
            else:
                data = np.empty(size, dtype=np.uint8)  # no zero-fill, unlike bytearray
                n = f.readinto(memoryview(data))
                if n != size:
                    raise fail(self.path, f"offset {n}", f"read {n} of {size} bytes")
        self.data = data
        self.size = len(data)
        self.u8 = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)

    def bytes_at(self, start, length, what):
        """Return ``length`` bytes at ``start`` as ``bytes``; fail if they run past the end."""
        if start < 0 or length < 0 or start + length > self.size:
            raise fail(
                self.path, f"offset {start}",
                f"{what} needs {length} bytes but the file has {self.size - start} left "
                f"(file size {self.size})",
            )
        return bytes(self.data[start:start + length])

    def unpack(self, fmt, start, what):
        """``struct.unpack_from`` with a bounds check that names ``what``."""
        n = struct.calcsize(fmt)
        if start < 0 or start + n > self.size:
            raise fail(self.path, f"offset {start}",
                       f"{what} needs {n} bytes, the file ends at {self.size}")
        return struct.unpack_from(fmt, self.data, start)

    def array(self, start, nbytes, dtype, shape, where):
        """An ndarray of ``dtype``/``shape`` over ``nbytes`` bytes at ``start``.

        Zero-copy when the start is aligned for the dtype; an aligned copy otherwise (NumPy
        and the kernels want aligned data). ``nbytes`` must already equal numel x itemsize.
        """
        if start < 0 or nbytes < 0 or start + nbytes > self.size:
            raise fail(self.path, where,
                       f"data [{start}, {start + nbytes}) runs past the end of the file "
                       f"({self.size} bytes)")
        return view_bytes(self.u8[start:start + nbytes], dtype, shape, self.path, where)


def view_bytes(raw, dtype, shape, path, where):
    """Reinterpret the 1-D uint8 array ``raw`` as ``dtype``/``shape``, copying if unaligned.

    Non-native byte order is converted (a copy). Refuses bool bytes other than 0 and 1.
    """
    dtype = np.dtype(dtype)
    try:
        if raw.ctypes.data % dtype.alignment:
            raw = raw.copy()
        arr = raw.view(dtype).reshape(shape)
    except ValueError as exc:
        raise fail(path, where, f"cannot view {raw.size} bytes as {dtype} {tuple(shape)}: {exc}") \
            from None
    if not dtype.isnative:
        arr = arr.astype(dtype.newbyteorder("="))
    if dtype.kind == "b" and arr.size and raw.max() > 1:
        raise fail(path, where, "a bool tensor holds a byte other than 0 or 1")
    return arr


def check_shape(shape, path, where):
    """Validate a shape read from a file: a list/tuple of ints in [0, 2**63), at most 64."""
    if not isinstance(shape, (list, tuple)):
        raise fail(path, where, f"shape must be a list of integers, got {type(shape).__name__}")
    if len(shape) > MAX_NDIM:
        raise fail(path, where, f"shape has {len(shape)} dimensions, at most {MAX_NDIM} allowed")
    for d in shape:
        if type(d) is not int or d < 0 or d > MAX_DIM:
            shown = d if type(d) is int else type(d).__name__
            raise fail(path, where, f"shape entries must be non-negative integers, got {shown}")
    return tuple(shape)


def numel_of(shape):
    n = 1
    for d in shape:
        n *= d
    return n

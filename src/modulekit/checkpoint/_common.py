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
from collections.abc import Mapping

import numpy as np

from modulekit._ext._tensor import as_array
from modulekit.dtypes import bfloat16_numpy, is_bfloat16

__all__ = [
    "CheckpointError", "FileBuffer", "SUPPORTED_NP_DTYPES", "atomic_write", "checked_items",
    "dtype_name",
    "memory_identity", "saveable_array",
]

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


_EAGER_NP_DTYPES = {
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
    "float16": np.dtype("<f2"),
    "bfloat16": None,           # ml_dtypes.bfloat16, imported on first look-up
    "int64": np.dtype("<i8"),
    "int32": np.dtype("<i4"),
    "int8": np.dtype("i1"),
    "uint8": np.dtype("u1"),
    "bool": np.dtype("?"),
}


class _SupportedDtypes(Mapping):
    """Data type name -> NumPy dtype; bfloat16's is resolved (ml_dtypes imported) only when
    it is looked up, i.e. when a checkpoint actually holds bfloat16."""

    def __getitem__(self, name):
        if name == "bfloat16":
            return bfloat16_numpy()
        return _EAGER_NP_DTYPES[name]

    def __iter__(self):
        return iter(_EAGER_NP_DTYPES)

    def __len__(self):
        return len(_EAGER_NP_DTYPES)


# NumPy dtypes modulekit has, by their little-endian NumPy form.
SUPPORTED_NP_DTYPES = _SupportedDtypes()


def dtype_name(np_dtype) -> str | None:
    """The modulekit name of native NumPy dtype ``np_dtype``, or None if modulekit has none
    (resolving bfloat16 imports nothing unless the array already is one)."""
    for name, dt in _EAGER_NP_DTYPES.items():
        if dt is not None and np_dtype == dt:
            return name
    return "bfloat16" if is_bfloat16(np_dtype) else None


def checked_items(state):
    """``state``'s items after checking it is a mapping with str keys (TypeError if not)."""
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a mapping of str to tensors, got {type(state).__name__}")
    for key in state:
        if not isinstance(key, str):
            raise TypeError(f"state keys must be str, got {type(key).__name__} {key!r}")
    return state.items()


def saveable_array(key, value):
    """Return ``(native-order ndarray, dtype name)`` for one state-dict value a writer is
    given, or raise ``TypeError`` naming the key and what was expected."""
    try:
        arr = as_array(value)  # Tensor, ndarray, torch tensor (bfloat16 too), array-likes
    except (TypeError, ValueError) as exc:
        raise TypeError(f"state[{key!r}]: {exc}") from None
    if not arr.dtype.isnative and arr.dtype.kind in "fiub":
        arr = arr.astype(arr.dtype.newbyteorder("="))
    name = dtype_name(arr.dtype)
    if name is None:
        raise TypeError(
            f"state[{key!r}]: dtype {arr.dtype} cannot be saved: expected one of "
            f"{', '.join(SUPPORTED_NP_DTYPES)}"
        )
    return arr, name


def memory_identity(arr):
    """Key under which two ndarrays are the very same memory (zero-size ones never are)."""
    if arr.size == 0:
        return None
    return (arr.__array_interface__["data"][0], arr.shape, arr.strides, arr.dtype.str)


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path, write):
    """Call ``write(binary file)`` on a temporary file in ``path``'s directory, then rename
    it to ``path``: a failure (an exception in ``write`` included) never leaves a
    half-written file under ``path``, and removes the temporary file. The file gets the
    permissions ``open`` would give it (0o666 less the umask)."""
    import tempfile  # (only writers need it: not on ``import modulekit``'s path)

    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".modulekit-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


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

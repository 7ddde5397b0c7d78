"""Shared-memory segments for :meth:`modulekit.Module.share_memory`.

Each shared array (a tensor's values, a packed weight buffer) lives in its own POSIX
shared-memory segment (``shm_open``: a file in ``/dev/shm`` on Linux) named ``mk_`` + 24 random
hex digits, mapped ``MAP_SHARED``. An array over a segment is a view of a
:class:`_Mapping` (an ``mmap.mmap``), found again by walking the array's ``base`` chain, so
pickling it sends a :data:`Handle` ``(name, segment size, offset, nbytes)`` instead of bytes.

Lifetime: the process that created a segment (its *owner*) unlinks it when its mapping dies (no
array of that process uses it any more) or at the owner's exit, whichever comes first; a process
forked from the owner never unlinks (the check is on the pid). Other processes map a segment by
name (:func:`attach`) without registering anything: their mappings stay valid after the unlink,
the pages go back to the system when the last mapping goes. The owner also registers each name
with ``multiprocessing``'s resource tracker, so that an owner killed by a signal still leaves no
segment behind (the tracker unlinks it, with its "leaked shared_memory" warning). A handle is
only as good as its owner: unpickling one after the owner released it raises
``FileNotFoundError``.

The space is reserved up front (``posix_fallocate``): a full ``/dev/shm`` raises ``OSError``
while allocating, never ``SIGBUS`` while copying.
"""

from __future__ import annotations

import mmap
import os
import re
import secrets
import threading
import weakref

import numpy as np

try:
    import _posixshmem
except ImportError:  # pragma: no cover - every POSIX CPython has it
    _posixshmem = None

__all__ = ["Handle", "attach", "copy_to_shared", "handle_of", "is_shared", "trim_heap"]

#: ``(name, segment_size, offset, nbytes)``: where a shared array's bytes are.
Handle = tuple

_NAME = re.compile(r"mk_[0-9a-f]{24}\Z")
_ALIGN = 64
_MAX_SEGMENT = 1 << 48

# name -> this process's mapping of it (one mapping per segment and process)
_attached: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_lock = threading.Lock()


class _Mapping(mmap.mmap):
    """A mapped segment; ``name``, ``size`` and ``owner_pid`` (0 when this process attached
    it rather than created it) are set right after creation."""


def _unavailable() -> OSError:
    return OSError("share_memory: POSIX shared memory (_posixshmem) is not available here")


def _unlink(name: str, owner_pid: int) -> None:
    """Unlink ``name`` if this is the process that created it (not a fork of it)."""
    if os.getpid() != owner_pid:
        return
    try:
        _posixshmem.shm_unlink("/" + name)
    except FileNotFoundError:
        pass
    try:
        from multiprocessing import resource_tracker

        resource_tracker.unregister("/" + name, "shared_memory")
    except Exception:  # pragma: no cover - interpreter shutting down
        pass


def _create(nbytes: int) -> _Mapping:
    if _posixshmem is None:  # pragma: no cover
        raise _unavailable()
    size = max(int(nbytes), 1)
    while True:
        name = "mk_" + secrets.token_hex(12)
        try:
            fd = _posixshmem.shm_open("/" + name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # pragma: no cover - 96 random bits
            continue
        break
    pid = os.getpid()
    try:
        from multiprocessing import resource_tracker

        resource_tracker.register("/" + name, "shared_memory")
        try:
            os.ftruncate(fd, size)
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, size)  # ENOSPC now rather than SIGBUS later
            mapping = _Mapping(fd, size)
        except BaseException:
            _unlink(name, pid)
            raise
    finally:
        os.close(fd)
    mapping.name, mapping.size, mapping.owner_pid = name, size, pid
    weakref.finalize(mapping, _unlink, name, pid)
    with _lock:
        _attached[name] = mapping
    return mapping


def _segment_of(arr: np.ndarray):
    """The :class:`_Mapping` ``arr``'s memory lies in, or None."""
    obj = arr
    for _ in range(64):
        if isinstance(obj, _Mapping):
            return obj
        if isinstance(obj, memoryview):
            obj = obj.obj
        elif isinstance(obj, np.ndarray):
            obj = obj.base
        else:
            return None
    return None


def is_shared(arr: np.ndarray) -> bool:
    """Whether ``arr``'s memory lies in a shared-memory segment."""
    return _segment_of(arr) is not None


def handle_of(arr: np.ndarray) -> Handle | None:
    """``(name, segment size, offset, nbytes)`` of a C-contiguous ``arr`` in a segment, 64-byte
    aligned in it (what :func:`attach` accepts); None otherwise."""
    seg = _segment_of(arr)
    if seg is None or not arr.flags.c_contiguous:
        return None
    offset = arr.ctypes.data - _address(seg) if arr.size else 0
    if offset % _ALIGN:  # a view at an odd place (from_numpy of a slice): pickled by value
        return None
    return (seg.name, seg.size, int(offset), int(arr.nbytes))


def _address(seg: _Mapping) -> int:
    return np.frombuffer(seg, np.uint8, count=1).ctypes.data


def copy_to_shared(arr: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``arr`` (same dtype and shape) in a new shared segment; ``arr``
    itself when it is in one already."""
    if is_shared(arr) and arr.flags.c_contiguous:
        return arr
    mapping = _create(arr.nbytes)
    out = np.frombuffer(mapping, np.uint8, count=arr.nbytes).view(arr.dtype).reshape(arr.shape)
    np.copyto(out, arr, casting="no")
    return out


def empty_shared(nbytes: int) -> np.ndarray:
    """``nbytes`` uninitialised bytes (a 1-D uint8 array, page aligned) in a new segment."""
    mapping = _create(nbytes)
    return np.frombuffer(mapping, np.uint8, count=int(nbytes))


def attach(handle, what: str = "array") -> np.ndarray:
    """Map the bytes a :data:`Handle` names: a 1-D uint8 array over the segment.

    Everything is checked before mapping: the name's form (``mk_`` + 24 hex digits, so a
    handle cannot reach another file), the types and ranges of the numbers, that the segment's
    real size is the size recorded and holds ``offset + nbytes``, and 64-byte alignment.
    Raises ``ValueError`` for a malformed or inconsistent handle and ``FileNotFoundError`` when
    the segment is gone (its owner released it).
    """
    if _posixshmem is None:  # pragma: no cover
        raise _unavailable()
    if not (isinstance(handle, tuple) and len(handle) == 4):
        raise ValueError(
            f"{what}: a shared-memory handle is a (name, size, offset, nbytes) tuple, got "
            f"{handle!r:.200}"
        )
    name, size, offset, nbytes = handle
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"{what}: shared-memory handle names {name!r:.100}, expected 'mk_' and 24 hex "
            "digits (a segment made by share_memory())"
        )
    for label, value in (("size", size), ("offset", offset), ("nbytes", nbytes)):
        if type(value) is not int or not 0 <= value <= _MAX_SEGMENT:
            raise ValueError(
                f"{what}: shared-memory handle {name}: {label} must be an int in "
                f"[0, 2**48], got {value!r:.100}"
            )
    if offset % _ALIGN or offset + nbytes > size:
        raise ValueError(
            f"{what}: shared-memory handle {name}: {nbytes} bytes at offset {offset} do not "
            f"fit a {size}-byte segment 64-byte aligned"
        )
    with _lock:
        mapping = _attached.get(name)
        if mapping is None:
            try:
                fd = _posixshmem.shm_open("/" + name, os.O_RDWR, 0)
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"{what}: shared-memory segment {name} does not exist: the process that "
                    "called share_memory() has released it (or exited)"
                ) from None
            try:
                real = os.fstat(fd).st_size
                if real != size:
                    raise ValueError(
                        f"{what}: shared-memory segment {name} has {real} bytes, the handle "
                        f"says {size}"
                    )
                mapping = _Mapping(fd, size)
            finally:
                os.close(fd)
            mapping.name, mapping.size, mapping.owner_pid = name, size, 0
            _attached[name] = mapping
        elif mapping.size != size:
            raise ValueError(
                f"{what}: shared-memory segment {name} has {mapping.size} bytes, the handle "
                f"says {size}"
            )
    return np.frombuffer(mapping, np.uint8, count=nbytes, offset=offset)


def trim_heap() -> None:
    """Give the heap's free pages back to the system (glibc ``malloc_trim``; no-op elsewhere).

    After ``share_memory()`` the private copies of the weights are freed, but glibc keeps
    freed heap chunks (its mmap threshold grows after large frees, so later large buffers come
    from the heap): measured on a 4-layer BERT, the owner's private memory stayed at the
    packed model's size (365 MB with the 201 MB of segments) until trimmed (225 MB).
    """
    global _libc
    if _libc is None:
        try:
            import ctypes

            _libc = ctypes.CDLL("libc.so.6")
            _libc.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _libc = False
    if _libc:
        _libc.malloc_trim(0)


_libc = None


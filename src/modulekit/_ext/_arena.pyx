"""The activation memory cache: reuse large array memory between forward calls.

A batch-32 ResNet-18 forward allocates about 300 MB of activations; NumPy's default handler
gets each from a fresh ``mmap`` (glibc maps blocks that large itself) and the pages are
faulted in, zeroed, on every call. This module holds a NumPy memory handler (NEP 49) over a
size-bucketed caching allocator (``kernels/arena/arena.c``): arrays of at least 256 KiB take a
cached block of their size class when one is idle, and give it back to the cache when they are
freed, so the next forward writes into pages that are already mapped.

:func:`call` makes the handler current (NumPy's handler is a context variable: per thread and
per ``contextvars`` context) only for the duration of a top-level module call;
``Module.__call__`` uses it for modules with children or hooks. Arrays keep the handler they
were allocated with, so results returned to the caller stay valid after the call and go back
to the cache when dropped (from any thread: the allocator has a lock). NumPy code outside a
module call keeps NumPy's default handler.

The cached (idle) bytes are capped (:func:`set_limit`, default 1 GiB or
``MODULEKIT_ARENA_LIMIT``), largest blocks evicted first; blocks not reused within the last 16
top-level calls are released (memory only a first call needed); :func:`empty_cache` unmaps
them all;
:func:`set_enabled` (or ``MODULEKIT_ARENA=0`` at import) turns the cache off.
"""

from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_New
from cpython.ref cimport PyObject

cimport numpy as cnp

import os

cnp.import_array()

cdef extern from *:
    """
    static PyDataMem_Handler mk_arena_handler = {
        "modulekit_arena", 1,
        {NULL, mk_arena_malloc, mk_arena_calloc, mk_arena_realloc, mk_arena_free}
    };
    #define mk_arena_handler_ptr() ((void *)&mk_arena_handler)
    #define mk_default_handler_capsule() (PyDataMem_DefaultHandler)
    """
    void *mk_arena_handler_ptr()
    PyObject *mk_default_handler_capsule()
    object PyObject_Call(object callable, object args, PyObject *kwargs)

__all__ = ["call", "empty_cache", "set_enabled", "is_enabled", "set_limit", "get_limit", "stats"]

_HANDLER_NAME = "modulekit_arena"
_DEFAULT_LIMIT = 1 << 30


cdef _init_allocator():
    cdef cnp.PyDataMem_Handler *h = <cnp.PyDataMem_Handler *>PyCapsule_GetPointer(
        <object>mk_default_handler_capsule(), "mem_handler")
    cdef mk_arena_fallback fb
    fb.ctx = h.allocator.ctx
    fb.malloc = h.allocator.malloc
    fb.calloc = h.allocator.calloc
    fb.realloc = h.allocator.realloc
    fb.free = h.allocator.free
    if mk_arena_init(&fb) != 0:
        raise RuntimeError("modulekit: the activation cache could not register its fork handler")


_init_allocator()
cdef object _capsule = PyCapsule_New(mk_arena_handler_ptr(), "mem_handler", NULL)


def _parse_bytes(text):
    """``"512M"``, ``"2G"``, ``"1048576"`` -> bytes (K/M/G are powers of 1024)."""
    t = str(text).strip().upper().removesuffix("B").removesuffix("I")
    scale = 1
    for suffix, factor in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("T", 1 << 40)):
        if t.endswith(suffix):
            t, scale = t.removesuffix(suffix), factor
            break
    try:
        value = float(t)
    except ValueError:
        raise ValueError(f"MODULEKIT_ARENA_LIMIT: expected a byte count such as 512M, got "
                         f"{text!r}") from None
    if value < 0:
        raise ValueError(f"MODULEKIT_ARENA_LIMIT must not be negative, got {text!r}")
    return int(value * scale)


cdef bint _enabled = os.environ.get("MODULEKIT_ARENA", "1").strip().lower() not in (
    "0", "off", "false", "no")
mk_arena_set_limit(_parse_bytes(os.environ.get("MODULEKIT_ARENA_LIMIT", str(_DEFAULT_LIMIT))))
if not _enabled:
    mk_arena_set_caching(0)


def call(forward, tuple args, dict kwargs):
    """``forward(*args, **kwargs)`` with the activation cache's memory handler current.

    Nested calls (the handler already current) and calls with the cache disabled go straight
    to ``forward``; otherwise the previous handler is restored when ``forward`` returns or
    raises.
    """
    cdef PyObject *kw = NULL if kwargs is None else <PyObject *>kwargs
    if not _enabled or cnp.PyDataMem_GetHandler() is _capsule:
        return PyObject_Call(forward, args, kw)
    old = cnp.PyDataMem_SetHandler(_capsule)
    try:
        return PyObject_Call(forward, args, kw)
    finally:
        cnp.PyDataMem_SetHandler(old)
        mk_arena_tick()


def empty_cache():
    """Release the memory the activation cache holds for reuse (like
    ``torch.cuda.empty_cache``).

    Arrays in use are untouched (their memory returns to the cache when they are freed).

    Returns
    -------
    int
        The number of bytes unmapped.
    """
    return mk_arena_release()


def set_enabled(enabled):
    """Turn the activation cache on or off (it is on unless ``MODULEKIT_ARENA=0``).

    Turning it off releases the cached memory; arrays already allocated from the cache stay
    valid and their memory is unmapped when they are freed. Module calls then allocate with
    NumPy's current handler.

    Parameters
    ----------
    enabled : bool
        The new state.

    Returns
    -------
    bool
        The previous state.
    """
    global _enabled
    cdef bint before = _enabled
    _enabled = bool(enabled)
    mk_arena_set_caching(_enabled)
    return before


def is_enabled():
    """Whether module calls allocate their large arrays from the activation cache.

    Returns
    -------
    bool
    """
    return _enabled


def set_limit(nbytes):
    """Cap the memory the activation cache keeps for reuse (default 1 GiB, or
    ``MODULEKIT_ARENA_LIMIT`` such as ``512M``).

    Over the cap the largest cached blocks are released first. Memory in use by arrays is
    not counted. ``0`` caches nothing.

    Parameters
    ----------
    nbytes : int or str
        Bytes, or a string with a K/M/G suffix.

    Returns
    -------
    int
        The previous cap in bytes.
    """
    cdef mk_arena_stats s
    value = _parse_bytes(nbytes) if isinstance(nbytes, str) else int(nbytes)
    if value < 0:
        raise ValueError(f"set_limit expects a non-negative byte count, got {nbytes!r}")
    mk_arena_get_stats(&s)
    mk_arena_set_limit(value)
    return s.limit_bytes


def get_limit():
    """The cap on the activation cache's reusable memory, in bytes.

    Returns
    -------
    int
    """
    cdef mk_arena_stats s
    mk_arena_get_stats(&s)
    return s.limit_bytes


def stats():
    """Counters of the activation cache.

    Returns
    -------
    dict
        ``hits`` / ``misses``: large allocations served from the cache / newly mapped;
        ``evictions``: cached blocks released to respect the limit; ``expired``: released for
        not being reused within ``max_idle_calls`` top-level calls; ``released``: released by
        :func:`empty_cache` or disabling; ``live_bytes`` / ``idle_bytes``: mapped bytes in use /
        cached for reuse; ``idle_blocks``; ``peak_bytes``: the largest live + idle total seen;
        ``limit_bytes``; ``calls``: top-level module calls made under the cache;
        ``max_idle_calls``; ``min_block_bytes``: the smallest request that is cached;
        ``enabled``.
    """
    cdef mk_arena_stats s
    mk_arena_get_stats(&s)
    return {
        "hits": s.hits,
        "misses": s.misses,
        "evictions": s.evictions,
        "expired": s.expired,
        "released": s.released,
        "live_bytes": s.live_bytes,
        "idle_bytes": s.idle_bytes,
        "idle_blocks": s.idle_blocks,
        "peak_bytes": s.peak_bytes,
        "limit_bytes": s.limit_bytes,
        "calls": s.ticks,
        "max_idle_calls": s.max_idle_ticks,
        "min_block_bytes": MK_ARENA_MIN_BYTES,
        "enabled": bool(_enabled),
    }


def _set_max_idle_calls(n):
    """Release idle blocks not reused within the last ``n`` top-level calls (default 16; the
    check runs every 8 calls). For tests. Returns the previous value."""
    cdef mk_arena_stats s
    if n < 0:
        raise ValueError(f"expected a non-negative call count, got {n}")
    mk_arena_get_stats(&s)
    mk_arena_set_max_idle_ticks(n)
    return s.max_idle_ticks


def _set_scoping(active):
    """Whether module calls make the cache's handler current, without releasing or disabling
    the cache (unlike :func:`set_enabled`): benchmarks compare both in one run with it.
    Returns the previous state."""
    global _enabled
    cdef bint before = _enabled
    _enabled = bool(active)
    return before


def _block_capacity(cnp.ndarray a):
    """Usable bytes of the cached block under ``a`` (which must own its data and come from this
    handler), 0 for a small block. For tests."""
    try:
        from numpy._core.multiarray import get_handler_name
    except ImportError:  # NumPy 1.x
        from numpy.core.multiarray import get_handler_name

    if not (cnp.PyArray_FLAGS(a) & cnp.NPY_ARRAY_OWNDATA) or get_handler_name(a) != _HANDLER_NAME:
        raise ValueError("the array does not own memory from the activation cache")
    cdef void *p = cnp.PyArray_DATA(a)
    return mk_arena_block_capacity(p) if mk_arena_is_large(p) else 0

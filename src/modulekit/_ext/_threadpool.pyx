# cython: language_level=3
"""modulekit's thread pool (``kernels/threadpool/threadpool.h``): parallel loops whose
caller never waits for a worker that has not started. The kernels reach it through the table
:func:`_api_capsule` hands them at import; this module also exposes a self-test loop for the
test suite."""
import numpy as np

cimport numpy as cnp
from cpython.pycapsule cimport PyCapsule_New
from libc.stdint cimport int64_t

cnp.import_array()

cdef extern from "threadpool/threadpool.h" nogil:
    ctypedef void (*mk_pool_task)(void *ctx, size_t item) noexcept nogil
    ctypedef struct mk_pool_api:
        long long (*parallel_for)(mk_pool_task fn, void *ctx, size_t n,
                                  int threads) noexcept nogil
        int (*workers)() noexcept nogil
    const mk_pool_api *mk_pool_get_api()
    size_t MK_POOL_MAX_ITEMS

cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clk, timespec *ts)
    int CLOCK_MONOTONIC

MAX_ITEMS = MK_POOL_MAX_ITEMS


def _api_capsule():
    """The pool's entry points (``mk_pool_api``, pool.h) in a PyCapsule named
    ``modulekit._ext._threadpool.api``: the kernel extensions install them at import."""
    return PyCapsule_New(<void *>mk_pool_get_api(), b"modulekit._ext._threadpool.api", NULL)


def workers():
    """Pool worker threads started so far (they persist, sleeping when idle)."""
    return mk_pool_get_api().workers()


ctypedef struct _Probe:
    int64_t *counts
    long long spin_ns


cdef long long _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <long long>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef void _probe_item(void *ctx, size_t item) noexcept nogil:
    cdef _Probe *p = <_Probe *>ctx
    cdef long long until = _now() + p.spin_ns
    while _now() < until:
        pass
    # each item is claimed once: a plain increment is enough, and a duplicate shows as 2
    p.counts[item] += 1


def _selftest(Py_ssize_t n, int threads, double item_seconds=0.0):
    """Run ``n`` items on the pool with ``threads`` threads, each busy for ``item_seconds``;
    returns how many times each item ran (the test suite checks every count is 1)."""
    if n < 0 or <size_t>n > MK_POOL_MAX_ITEMS or threads < 1:
        raise ValueError(f"_selftest: expected 0 <= n <= {MK_POOL_MAX_ITEMS} and threads >= 1")
    cdef cnp.ndarray counts = np.zeros(n, np.int64)
    cdef _Probe probe
    probe.counts = <int64_t *>cnp.PyArray_DATA(counts)
    probe.spin_ns = <long long>(item_seconds * 1e9)
    with nogil:
        mk_pool_get_api().parallel_for(_probe_item, &probe, <size_t>n, threads)
    return counts

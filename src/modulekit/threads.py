"""Thread count of modulekit's parallel kernels.

Every parallel region gets its thread count explicitly from here: the count set with
:func:`set_num_threads`, else OpenMP's default (``OMP_NUM_THREADS``, or the core count),
capped by a lower limit set later through OpenMP in the calling thread, which is what
``threadpoolctl.threadpool_limits(n)`` does. Small operations stay on one thread regardless.

In a child created by ``os.fork()`` (``multiprocessing``'s "fork" start method) after modulekit
may have started its OpenMP thread team, every kernel runs on one thread: libgomp's team does
not survive a fork and a parallel region there would hang (GCC bug 60035). The "spawn" and
"forkserver" start methods keep full threading.
"""

from __future__ import annotations

import operator
import os

from modulekit._ext import _openmp_helpers

__all__ = ["set_num_threads", "get_num_threads", "openmp_enabled"]

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_openmp_helpers._after_fork_in_child)


def set_num_threads(n: int) -> None:
    """Use up to ``n`` threads in modulekit's kernels (overrides ``OMP_NUM_THREADS``).

    A ``threadpoolctl.threadpool_limits`` block with a lower limit still wins inside it.
    """
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"set_num_threads expects an int, got {type(n).__name__}") from None
    if n < 1:
        raise ValueError(f"set_num_threads expects a positive thread count, got {n}")
    _openmp_helpers.set_num_threads(n)


def get_num_threads() -> int:
    """The number of threads modulekit's parallel kernels use now, in this thread."""
    return _openmp_helpers.get_num_threads()


def openmp_enabled() -> bool:
    """True when modulekit was built with OpenMP (else every kernel runs serially)."""
    return _openmp_helpers.openmp_enabled()

"""OpenMP guard and modulekit's thread count.

modulekit keeps its own thread count and passes it to every parallel region explicitly, so
``modulekit.set_num_threads``, ``OMP_NUM_THREADS`` and ``threadpoolctl.threadpool_limits`` all
take effect: OpenMP's ``omp_set_num_threads`` (what threadpoolctl calls) only changes the
calling thread's default, and a limit set that way is honoured by reading it back here.
"""

cdef int _user_threads = 0          # 0: not set by modulekit.set_num_threads
cdef int _initial_max = omp_get_max_threads()   # OpenMP's default at import (OMP_NUM_THREADS)


cdef int effective_threads() noexcept nogil:
    cdef int now = omp_get_max_threads()
    cdef int n = _user_threads if _user_threads > 0 else now
    if now < _initial_max and now < n:
        n = now    # a limit set after import (threadpoolctl) wins
    return n if n > 0 else 1


def openmp_enabled():
    """True when the extensions were built with OpenMP."""
    return bool(MK_OPENMP)


def set_num_threads(int n):
    global _user_threads
    _user_threads = n


def get_num_threads():
    return effective_threads()


def reset_num_threads():
    """Forget the count set by set_num_threads (OpenMP's default applies again)."""
    global _user_threads
    _user_threads = 0

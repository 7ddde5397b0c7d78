"""OpenMP guard, modulekit's thread count and the contention back-off's state.

modulekit keeps its own thread count and passes it to every parallel region explicitly, so
``modulekit.set_num_threads``, ``OMP_NUM_THREADS`` and ``threadpoolctl.threadpool_limits`` all
take effect: OpenMP's ``omp_set_num_threads`` (what threadpoolctl calls) only changes the
calling thread's default, and a limit set that way is honoured by reading it back here.

Fork safety: libgomp's thread pool does not survive ``fork()`` (only the forking thread is
copied) and a parallel region in the child then waits forever for the missing workers (GCC bug
60035). ``effective_threads`` records when it hands out more than one thread (a team may have
started); :func:`_after_fork_in_child` (registered with ``os.register_at_fork`` by
``modulekit.threads``) then makes every parallel region of the child serial.
"""

from cython.parallel cimport parallel

cdef int _user_threads = 0          # 0: not set by modulekit.set_num_threads
cdef int _initial_max = omp_get_max_threads()   # OpenMP's default at import (OMP_NUM_THREADS)


cdef int _team_maybe_started = 0   # set once a region may have run with more than 1 thread
cdef int _serial_after_fork = 0    # set in a child forked after that: serial from then on


cdef inline int _current_threads() noexcept nogil:
    if _serial_after_fork:
        return 1
    cdef int now = omp_get_max_threads()
    cdef int n = _user_threads if _user_threads > 0 else now
    if now < _initial_max and now < n:
        n = now    # a limit set after import (threadpoolctl) wins
    return n if n > 1 else 1


cdef int effective_threads() noexcept nogil:
    global _team_maybe_started
    cdef int n = _current_threads()
    if n > 1:
        _team_maybe_started = 1    # the caller may now start a team of n threads
    return n


cdef mk_team_state *team_state() noexcept nogil:
    return mk_team_current()


_TEAM = bind_team()


def _team_address():
    """The address of the process's contention back-off state (see ``bind_team``)."""
    return <size_t>team_state()


def _team_regions():
    """How many parallel regions the back-off has recorded (for tests)."""
    return team_state().regions


def _team_placements():
    """How many times a worker thread has narrowed its CPU set to keep off the calling
    thread's CPU (kernels/common/team.h, worker placement; for tests)."""
    return team_state().placements


def _backing_off():
    """True while every parallel region runs on the calling thread after contention
    (kernels/common/team.h; for tests)."""
    return bool(mk_team_backing_off())


def _reset_backoff():
    """Forget the contention back-off state (for tests and benchmarks)."""
    mk_team_reset()


def _record_parallel_call(long long worked_ns, long long waited_ns):
    """Record a parallel region that worked and waited this long, ending now (for tests)."""
    cdef long long end = mk_now_ns()
    mk_team_record(end - worked_ns - waited_ns, end, waited_ns)


def openmp_enabled():
    """True when the extensions were built with OpenMP."""
    return bool(MK_OPENMP)


def set_num_threads(int n):
    global _user_threads
    _user_threads = n


def get_num_threads():
    return _current_threads()


def user_threads():
    """The count set by set_num_threads, 0 when none is set."""
    return _user_threads


def reset_num_threads():
    """Forget the count set by set_num_threads (OpenMP's default applies again)."""
    global _user_threads
    _user_threads = 0


def _after_fork_in_child():
    """Run in a forked child: go serial if the parent may have started an OpenMP team."""
    global _serial_after_fork
    if _team_maybe_started:
        _serial_after_fork = 1


def serial_after_fork():
    """True in a process forked after an OpenMP team may have started (kernels run serially)."""
    return bool(_serial_after_fork)


def parallel_team_size():
    """Run an empty parallel region with :func:`get_num_threads` threads; return the team size
    OpenMP gave it (1 without OpenMP). Starts the thread team, as a first parallel kernel does."""
    cdef int n = effective_threads()
    cdef int size = 1
    cdef int *out = &size    # written through a pointer: names assigned in a region are private
    with nogil, parallel(num_threads=n):
        if omp_get_thread_num() == 0:
            out[0] = omp_get_num_threads()
    return size

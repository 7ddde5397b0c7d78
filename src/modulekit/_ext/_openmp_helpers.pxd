# The one OpenMP guard for Cython code (see kernels/mk_omp.h): cimport from here, never from
# openmp directly, so the package builds and runs serially without OpenMP.

cdef extern from "mk_omp.h" nogil:
    int MK_OPENMP
    int omp_get_max_threads()
    int omp_get_thread_num()
    int omp_get_num_threads()

# Threads a parallel region of modulekit may use now, in the calling thread: the count set by
# modulekit.set_num_threads (else OpenMP's default), capped by a lower limit set since import
# through omp_set_num_threads (threadpoolctl.threadpool_limits does that).
cdef int effective_threads() noexcept nogil

# The contention back-off of every parallel region (kernels/common/team.h). Every extension
# links its own copy of kernels/common; bind_team() at a module's import makes its copy use
# this module's state, the one of the process.
cdef extern from "common/team.h" nogil:
    ctypedef struct mk_team_state:
        unsigned long long regions
        unsigned long long placements
    mk_team_state *mk_team_bind(mk_team_state *shared)
    mk_team_state *mk_team_current()
    int mk_team_backing_off()
    void mk_team_reset()
    long long mk_now_ns()
    void mk_team_record(long long start, long long end, long long waited)

cdef mk_team_state *team_state() noexcept nogil


cdef inline size_t bind_team() noexcept nogil:
    """Bind the calling extension's kernels to the process's back-off state; returns its
    address (modules keep it as ``_TEAM``, which tests compare)."""
    return <size_t>mk_team_bind(team_state())

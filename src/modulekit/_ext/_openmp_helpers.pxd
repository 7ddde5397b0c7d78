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

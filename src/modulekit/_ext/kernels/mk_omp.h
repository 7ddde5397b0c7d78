/* The one OpenMP guard of modulekit: every C kernel and Cython module reaches OpenMP through
 * this header (Cython through _openmp_helpers.pxd, which includes it). Without -fopenmp the
 * same code compiles serial: the omp_* calls below become single-thread stand-ins and the
 * pragmas are ignored by the compiler. */
#ifndef MK_OMP_H
#define MK_OMP_H

#ifdef _OPENMP
#include <omp.h>
#define MK_OPENMP 1
#else
#define MK_OPENMP 0
static inline int omp_get_max_threads(void) { return 1; }
static inline int omp_get_thread_num(void) { return 0; }
static inline int omp_get_num_threads(void) { return 1; }
static inline void omp_set_num_threads(int n) { (void)n; }
#endif

#endif /* MK_OMP_H */

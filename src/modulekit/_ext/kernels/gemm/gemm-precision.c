/* float32 matmul precision (see gemm.h): one process-wide value, as torch's
 * set_float32_matmul_precision, and a per-thread override for the context-manager form.
 * Read by the Cython caller, in the calling thread, before it chooses a configuration: the
 * OpenMP workers never read it. Relaxed atomics: a change takes effect at the next call. */
#include "gemm.h"

static int mk_prec_global = MK_PREC_HIGHEST;
static _Thread_local int mk_prec_thread = -1;

int mk_gemm_precision(void) {
    const int t = mk_prec_thread;
    return t >= 0 ? t : __atomic_load_n(&mk_prec_global, __ATOMIC_RELAXED);
}

void mk_gemm_set_precision(int p) { __atomic_store_n(&mk_prec_global, p, __ATOMIC_RELAXED); }

int mk_gemm_get_global_precision(void) {
    return __atomic_load_n(&mk_prec_global, __ATOMIC_RELAXED);
}

int mk_gemm_set_thread_precision(int p) {
    const int old = mk_prec_thread;
    mk_prec_thread = p;
    return old;
}

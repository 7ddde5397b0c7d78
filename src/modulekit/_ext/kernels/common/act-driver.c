/* Element-wise activations: the ISA table of the float32 row functions, the float64 reference,
 * and the OpenMP split of large arrays. */
#include "common/act.h"
#include "isa.h"
#include "mk_omp.h"

typedef void (*mk_vact_fn)(size_t n, const float *x, float *y, int act, float lo, float hi);

static mk_vact_fn vact_for(int isa) {
#if MK_X86
    if (isa >= MK_ISA_AVX512) return mk_f32_vact__avx512;
    if (isa >= MK_ISA_AVX2) return mk_f32_vact__avx2;
#endif
    (void)isa;
    return mk_f32_vact__scalar;
}

/* Elements per OpenMP task: n split evenly over the threads, in multiples of 16 (whole
 * vectors), at least 4096 (below that a task costs more than it computes). */
static size_t act_chunk(size_t n, int nthreads) {
    size_t chunk = (n + (size_t)nthreads - 1) / (size_t)nthreads;
    chunk = (chunk + 15u) & ~(size_t)15u;
    return chunk < 4096u ? 4096u : chunk;
}

static void act_f64_span(size_t n, const double *x, double *y, int act, double lo, double hi) {
    for (size_t i = 0; i < n; i++) y[i] = mk_act_f64x1(x[i], act, lo, hi);
}

/* SPAN(len, x + i, y + i, act, lo, hi) over n elements, one task of act_chunk elements each */
#define MK_ACT_TASKS(SPAN)                                                                   \
    do {                                                                                     \
        if (nthreads < 1) nthreads = 1;                                                      \
        const size_t chunk = act_chunk(n, nthreads);                                         \
        const ptrdiff_t tasks = (ptrdiff_t)((n + chunk - 1) / chunk);                        \
        ptrdiff_t t;                                                                         \
        _Pragma("omp parallel for num_threads(nthreads) schedule(static) if (tasks > 1)")    \
        for (t = 0; t < tasks; t++) {                                                        \
            const size_t i = (size_t)t * chunk;                                              \
            SPAN(n - i < chunk ? n - i : chunk, x + i, y + i, act, lo, hi);                  \
        }                                                                                    \
    } while (0)

void mk_act_f32(int isa, size_t n, const float *x, float *y, int act, float lo, float hi,
                int nthreads) {
    const mk_vact_fn fn = vact_for(isa);
    MK_ACT_TASKS(fn);
}

void mk_act_f64(size_t n, const double *x, double *y, int act, double lo, double hi,
                int nthreads) {
    MK_ACT_TASKS(act_f64_span);
}

/* The GEMM engine's entry points for the convolution's Winograd GEMM stage, as a table of
 * plain-typed functions.
 *
 * The extensions export no C symbols to each other, so the engine (in _gemm) hands this table
 * to the convolution (in _conv) at import through a PyCapsule
 * (_gemm._winograd_engine_capsule -> mk_wino_eng_install); see kernels/gemm/gemm-wino-api.c
 * for what each function does. */
#ifndef MK_WINO_ENG_API_H
#define MK_WINO_ENG_API_H

#include <stddef.h>

typedef struct {
    /* 0 where the engine has no row kernels for float32 on this ISA (generic) */
    int (*available)(int isa);
    /* the engine's panel width */
    int (*nr)(int isa);
    /* bytes of one packed U_t^T (Cin x Cout) */
    size_t (*bytes)(int isa, int Cout, int Cin);
    /* pack T matrices U_t (Cout x Cin, C-contiguous, one after the other) as U_t^T, bias in
     * group tbias only, groups bytes() apart from dst */
    void (*pack)(int isa, int T, int Cout, int Cin, const float *ut, int tbias,
                 const float *bias, void *dst);
    /* C (rows x Cout, row stride ldc) = A (rows x Cin, row stride lda, read in place) . U^T
     * for panels [p0, p1); 0, or -1 when a buffer could not be allocated */
    int (*gemm)(int isa, int rows, int Cout, int Cin, const float *a, ptrdiff_t lda,
                const void *u, float *c, ptrdiff_t ldc, int p0, int p1);
} mk_wino_eng_api;

#endif

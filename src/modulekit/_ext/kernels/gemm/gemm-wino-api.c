/* The GEMM engine's entry points for the convolution's Winograd GEMM stage (the table of
 * wino-eng-api.h; see conv/f32-winograd-driver.c): per transform point t,
 *     M_t^T [tiles x Cout] = V_t^T [tiles x Cin] . U_t^T [Cin x Cout]
 * with U_t^T packed by mk_gemm_pack into the engine's NR-column panels (the weights are the
 * vector operand) and the few tile rows read in place by the engine's row kernels
 * (mk_gemm_range: the MR-row and small-M direct kernels). The convolution extension reaches
 * these through mk_gemm_wino_api, handed over at import (see wino-eng-api.h). */
#include <math.h>

#include "gemm.h"

/* the engine configuration for float32 on this ISA, or NULL where the engine has no row
 * kernels (the portable path: there the igemm orientation stays) */
static const mk_gemm_config *eng_config(int isa) {
    const mk_gemm_config *cfg = mk_gemm_get_config(MK_COMPUTE_F32, MK_STORAGE_F32, isa);
    if (cfg == NULL || cfg->mr > MK_SMALLM_MAX) return NULL;
    for (size_t r = 1; r <= cfg->mr; r++)
        if (cfg->smallm[r] == NULL) return NULL;
    return cfg;
}

static int eng_available(int isa) { return eng_config(isa) != NULL; }

static int eng_nr(int isa) { return (int)eng_config(isa)->nr; }

static size_t eng_bytes(int isa, int Cout, int Cin) {
    return mk_gemm_packed_size(eng_config(isa), (size_t)Cout, (size_t)Cin);
}

static void eng_pack(int isa, int T, int Cout, int Cin, const float *ut, int tbias,
                      const float *bias, void *dst) {
    const mk_gemm_config *cfg = eng_config(isa);
    const size_t sz = mk_gemm_packed_size(cfg, (size_t)Cout, (size_t)Cin);
    for (int t = 0; t < T; t++) /* U_t (Cout x Cin, C-contiguous) is B = U_t^T with rs 1 */
        mk_gemm_pack(cfg, (size_t)Cout, (size_t)Cin, ut + (size_t)t * Cout * Cin, 1, Cin,
                     t == tbias ? bias : NULL, (unsigned char *)dst + t * sz, 1);
}

static int eng_gemm(int isa, int rows, int Cout, int Cin, const float *a, ptrdiff_t lda,
                     const void *u, float *c, ptrdiff_t ldc, int p0, int p1) {
    const mk_gemm_config *cfg = eng_config(isa);
    const mk_epilogue ep = {MK_ACT_NONE, -INFINITY, INFINITY, -INFINITY, INFINITY};
    mk_gemm_problem pr;
    mk_gemm_problem_init(&pr, cfg, (size_t)rows, (size_t)Cout, (size_t)Cin, a, lda, 1, u, c,
                         (size_t)ldc, &ep);
    return mk_gemm_range(&pr, 0, (size_t)rows, (size_t)p0, (size_t)p1);
}

const mk_wino_eng_api mk_gemm_wino_api = {eng_available, eng_nr, eng_bytes, eng_pack, eng_gemm};

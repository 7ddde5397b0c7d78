/* Template of the main GEMM microkernel (see mk_gemm_ukernel in gemm.h). Included once per
 * instantiation, after gemm-ops.h, with:
 *   MK_FN     function name              MK_MR   rows of the register block
 *   MK_NV     vectors per row (NR = MK_NV * V_N)
 *   MK_WT     storage element type       MK_LOADW(p)  V_N weights -> one V_T
 * The accumulators (MK_MR x MK_NV vectors) live in registers: every loop over them has a
 * compile-time trip count and is fully unrolled. Undefines its parameters at the end. */

#define MK_NR_ (MK_NV * V_N)

MK_TARGET void MK_FN(size_t mr, size_t nc, size_t kc, const void *a_, const void *w_, void *c_,
                     size_t ldc, const void *init_, const mk_epilogue *ep) {
    const MK_CT *restrict a = (const MK_CT *)a_; /* in: packed A, a[k * MK_MR + i] */
    const MK_WT *restrict w = (const MK_WT *)w_; /* in: kc x NR weights */
    MK_CT *restrict c = (MK_CT *)c_;             /* in/out: mr x nc tile of C */
    V_MASK_T mask[MK_NV];
    V_T acc[MK_MR][MK_NV];
    const int full = nc >= (size_t)MK_NR_;

#pragma GCC unroll 8
    for (int v = 0; v < MK_NV; v++) mask[v] = V_MASK((ptrdiff_t)nc - v * V_N);

    if (init_ != NULL) {
        const MK_CT *b = (const MK_CT *)init_;
#pragma GCC unroll 8
        for (int v = 0; v < MK_NV; v++) {
            const V_T bv = V_LOADU(b + v * V_N);
#pragma GCC unroll 32
            for (int i = 0; i < MK_MR; i++) acc[i][v] = bv;
        }
    } else {
#pragma GCC unroll 32
        for (int i = 0; i < MK_MR; i++) {
            /* rows past mr re-read row mr - 1: valid memory, result never stored */
            const MK_CT *row = c + (size_t)(i < (int)mr ? i : (int)mr - 1) * ldc;
#pragma GCC unroll 8
            for (int v = 0; v < MK_NV; v++) acc[i][v] = V_MASKLOAD(row + v * V_N, mask[v]);
        }
    }

    for (size_t k = 0; k < kc; k++) {
        V_T wv[MK_NV];
#pragma GCC unroll 8
        for (int v = 0; v < MK_NV; v++) wv[v] = MK_LOADW(w + v * V_N);
#pragma GCC unroll 32
        for (int i = 0; i < MK_MR; i++) {
            const V_T ai = V_SET1(a[i]);
#pragma GCC unroll 8
            for (int v = 0; v < MK_NV; v++) acc[i][v] = V_FMA(ai, wv[v], acc[i][v]);
        }
        a += MK_MR;
        w += MK_NR_;
    }

    if (ep != NULL && MK_ACT_IN_REGISTERS(ep->act)) {
        const V_T lo = V_SET1(V_LO(ep)), hi = V_SET1(V_HI(ep));
#pragma GCC unroll 32
        for (int i = 0; i < MK_MR; i++)
#pragma GCC unroll 8
            for (int v = 0; v < MK_NV; v++) acc[i][v] = V_MIN(hi, V_MAX(lo, acc[i][v]));
    }

#pragma GCC unroll 32
    for (int i = 0; i < MK_MR; i++) {
        if (i < (int)mr) {
            MK_CT *row = c + (size_t)i * ldc;
            if (full) {
#pragma GCC unroll 8
                for (int v = 0; v < MK_NV; v++) V_STOREU(row + v * V_N, acc[i][v]);
            } else {
#pragma GCC unroll 8
                for (int v = 0; v < MK_NV; v++) V_MASKSTORE(row + v * V_N, mask[v], acc[i][v]);
            }
        }
    }

    if (ep != NULL && MK_ACT_ON_TILE(ep->act)) MK_ACT_TILE(mr, nc, c, ldc, ep);
}

#undef MK_NR_
#undef MK_FN
#undef MK_MR
#undef MK_NV
#undef MK_WT
#undef MK_LOADW

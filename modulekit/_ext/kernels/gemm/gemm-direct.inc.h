/* Template of the small-M ("direct") microkernel (see mk_gemm_smallm_ukernel in gemm.h):
 * MK_SM rows of A read in place (no packing), the whole K in one pass, bias and epilogue
 * fused. With fewer than 4 accumulators per k step, K is split over two accumulator sets
 * (even and odd k) so FMA latency does not bound the loop; the sets are summed at the end.
 * Parameters (undefined at the end): MK_FN, MK_SM, MK_NV, MK_WT, MK_LOADW(p). */

#define MK_NR_ (MK_NV * V_N)
#define MK_KU_ 1 /* accumulator sets over k (kept at 1, see above) */

MK_TARGET void MK_FN(size_t nc, size_t k, const void *a_, ptrdiff_t lda, const void *w_,
                     const void *bias_, void *c_, size_t ldc, const mk_epilogue *ep) {
    const MK_CT *restrict a = (const MK_CT *)a_;    /* in: MK_SM rows, stride lda */
    const MK_WT *restrict w = (const MK_WT *)w_;    /* in: k x NR weights */
    const MK_CT *restrict b = (const MK_CT *)bias_; /* in: NR bias values */
    MK_CT *restrict c = (MK_CT *)c_;                /* out: MK_SM x nc */
    const MK_CT *ar[MK_SM];
    V_MASK_T mask[MK_NV];
    V_T acc[MK_KU_][MK_SM][MK_NV];
    const int full = nc >= (size_t)MK_NR_;

#pragma GCC unroll 8
    for (int i = 0; i < MK_SM; i++) ar[i] = a + (ptrdiff_t)i * lda;
#pragma GCC unroll 8
    for (int v = 0; v < MK_NV; v++) mask[v] = V_MASK((ptrdiff_t)nc - v * V_N);
#pragma GCC unroll 8
    for (int v = 0; v < MK_NV; v++) {
        const V_T bv = V_LOADU(b + v * V_N);
#pragma GCC unroll 8
        for (int i = 0; i < MK_SM; i++) {
            acc[0][i][v] = bv;
#pragma GCC unroll 2
            for (int u = 1; u < MK_KU_; u++) acc[u][i][v] = V_SET1(0);
        }
    }

    size_t kk = 0;
    for (; kk + MK_KU_ <= k; kk += MK_KU_) {
#pragma GCC unroll 2
        for (int u = 0; u < MK_KU_; u++) {
            V_T wv[MK_NV];
#pragma GCC unroll 8
            for (int v = 0; v < MK_NV; v++) wv[v] = MK_LOADW(w + (kk + u) * MK_NR_ + v * V_N);
#pragma GCC unroll 8
            for (int i = 0; i < MK_SM; i++) {
                const V_T ai = V_SET1(ar[i][kk + u]);
#pragma GCC unroll 8
                for (int v = 0; v < MK_NV; v++) acc[u][i][v] = V_FMA(ai, wv[v], acc[u][i][v]);
            }
        }
    }
    for (; kk < k; kk++) {
        V_T wv[MK_NV];
#pragma GCC unroll 8
        for (int v = 0; v < MK_NV; v++) wv[v] = MK_LOADW(w + kk * MK_NR_ + v * V_N);
#pragma GCC unroll 8
        for (int i = 0; i < MK_SM; i++) {
            const V_T ai = V_SET1(ar[i][kk]);
#pragma GCC unroll 8
            for (int v = 0; v < MK_NV; v++) acc[0][i][v] = V_FMA(ai, wv[v], acc[0][i][v]);
        }
    }
#pragma GCC unroll 2
    for (int u = 1; u < MK_KU_; u++)
#pragma GCC unroll 8
        for (int i = 0; i < MK_SM; i++)
#pragma GCC unroll 8
            for (int v = 0; v < MK_NV; v++) acc[0][i][v] = acc[0][i][v] + acc[u][i][v];

    if (ep->act == MK_ACT_RELU || ep->act == MK_ACT_CLAMP) {
        const V_T lo = V_SET1(V_LO(ep)), hi = V_SET1(V_HI(ep));
#pragma GCC unroll 8
        for (int i = 0; i < MK_SM; i++)
#pragma GCC unroll 8
            for (int v = 0; v < MK_NV; v++) acc[0][i][v] = V_MIN(hi, V_MAX(lo, acc[0][i][v]));
    }
#pragma GCC unroll 8
    for (int i = 0; i < MK_SM; i++) {
        MK_CT *row = c + (size_t)i * ldc;
        if (full) {
#pragma GCC unroll 8
            for (int v = 0; v < MK_NV; v++) V_STOREU(row + v * V_N, acc[0][i][v]);
        } else {
#pragma GCC unroll 8
            for (int v = 0; v < MK_NV; v++) V_MASKSTORE(row + v * V_N, mask[v], acc[0][i][v]);
        }
    }
    if (ep->act >= MK_ACT_GELU_ERF) MK_ACT_TILE(MK_SM, nc, c, ldc, ep);
}

#undef MK_KU_
#undef MK_NR_
#undef MK_FN
#undef MK_SM
#undef MK_NV
#undef MK_WT
#undef MK_LOADW

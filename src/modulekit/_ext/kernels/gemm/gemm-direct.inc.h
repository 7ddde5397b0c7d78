/* Template of the small-M ("direct") microkernel (see mk_gemm_smallm_ukernel in gemm.h):
 * MK_SM rows of A read in place (no packing), MK_NP adjacent weight panels (MK_NP x NR
 * columns) per call, the whole K in one pass, bias and epilogue fused. Each output element is
 * accumulated exactly as in the main kernel (bias first, then k in order), so results do not
 * depend on the batch size or on which path ran. For one row, two panels per call give four
 * independent FMA chains, so FMA latency does not bound the weight stream. The caller may
 * name weights of a later call to prefetch into L2 meanwhile (pf, pfl: see gemm.h).
 * Parameters (undefined at the end): MK_FN, MK_SM, MK_NP, MK_NV, MK_WT, MK_LOADW(p). */

#define MK_NR_ (MK_NV * V_N)
#define MK_NA_ (MK_NP * MK_NV) /* accumulators per row */

MK_TARGET void MK_FN(size_t nc, size_t k, const void *a_, ptrdiff_t lda, const void *panel_,
                     size_t ps, void *c_, size_t ldc, const mk_epilogue *ep, const void *pf,
                     size_t pfl) {
    const MK_CT *restrict a = (const MK_CT *)a_; /* in: MK_SM rows, stride lda */
    MK_CT *restrict c = (MK_CT *)c_;             /* out: MK_SM x nc, nc <= MK_NP * NR */
    const MK_CT *ar[MK_SM];
    const MK_WT *w[MK_NP];  /* in: k x NR weights of each panel */
    const MK_CT *b[MK_NP];  /* in: NR bias values of each panel */
    V_MASK_T mask[MK_NA_];
    V_T acc[MK_SM][MK_NA_];
    const int full = nc >= (size_t)(MK_NP * MK_NR_);

#pragma GCC unroll 8
    for (int q = 0; q < MK_NP; q++) {
        /* a panel past nc (only when nc <= NR) re-reads panel 0; its columns are not stored */
        const unsigned char *pn =
            (const unsigned char *)panel_ + ((size_t)q * MK_NR_ < nc ? (size_t)q * ps : 0);
        b[q] = (const MK_CT *)pn;
        w[q] = (const MK_WT *)(pn + MK_NR_ * sizeof(MK_CT));
    }
#pragma GCC unroll 8
    for (int i = 0; i < MK_SM; i++) ar[i] = a + (ptrdiff_t)i * lda;
#pragma GCC unroll 8
    for (int v = 0; v < MK_NA_; v++) mask[v] = V_MASK((ptrdiff_t)nc - v * V_N);
#pragma GCC unroll 8
    for (int v = 0; v < MK_NA_; v++) {
        const V_T bv = V_LOADU(b[v / MK_NV] + (v % MK_NV) * V_N);
#pragma GCC unroll 8
        for (int i = 0; i < MK_SM; i++) acc[i][v] = bv;
    }

    const char *pfp = (const char *)pf;
    size_t pfacc = 0; /* Bresenham: pfl lines over k iterations */
    for (size_t kk = 0; kk < k; kk++) {
        if (pfl) {
            for (pfacc += pfl; pfacc >= k; pfacc -= k, pfp += 64) __builtin_prefetch(pfp, 0, 2);
        }
        V_T wv[MK_NA_];
#pragma GCC unroll 8
        for (int v = 0; v < MK_NA_; v++)
            wv[v] = MK_LOADW(w[v / MK_NV] + kk * MK_NR_ + (v % MK_NV) * V_N);
#pragma GCC unroll 8
        for (int i = 0; i < MK_SM; i++) {
            const V_T ai = V_SET1(ar[i][kk]);
#pragma GCC unroll 8
            for (int v = 0; v < MK_NA_; v++) acc[i][v] = V_FMA(ai, wv[v], acc[i][v]);
        }
    }

    if (MK_ACT_IN_REGISTERS(ep->act)) {
        const V_T lo = V_SET1(V_LO(ep)), hi = V_SET1(V_HI(ep));
#pragma GCC unroll 8
        for (int i = 0; i < MK_SM; i++)
#pragma GCC unroll 8
            for (int v = 0; v < MK_NA_; v++) acc[i][v] = V_MIN(hi, V_MAX(lo, acc[i][v]));
    }
#pragma GCC unroll 8
    for (int i = 0; i < MK_SM; i++) {
        MK_CT *row = c + (size_t)i * ldc;
        if (full) {
#pragma GCC unroll 8
            for (int v = 0; v < MK_NA_; v++) V_STOREU(row + v * V_N, acc[i][v]);
        } else {
#pragma GCC unroll 8
            for (int v = 0; v < MK_NA_; v++) V_MASKSTORE(row + v * V_N, mask[v], acc[i][v]);
        }
    }
    if (MK_ACT_ON_TILE(ep->act)) MK_ACT_TILE(MK_SM, nc, c, ldc, ep);
}

#undef MK_NA_
#undef MK_NR_
#undef MK_FN
#undef MK_SM
#undef MK_NP
#undef MK_NV
#undef MK_WT
#undef MK_LOADW

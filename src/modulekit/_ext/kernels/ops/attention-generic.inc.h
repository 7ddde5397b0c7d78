/* Portable per-head attention blocks, written so that the inner loops vectorise (unit stride,
 * no reductions); included by ops-attention.c once for the generic build and once inside an
 * AVX2+FMA target region; ATT_NAME names the copy, ATT_T is float or double. */

/* S[i][0..Lk) = sum_c Q[i][c] * Kt[c][0..Lk) for i < Lq; Kt row stride ldk. */
ATT_ATTR static void ATT_NAME(qk)(size_t lq, size_t lk, size_t d, const ATT_T *q, ptrdiff_t qsr,
                                  const ATT_T *kt, size_t ldk, ATT_T *s, size_t lds)
{
    for (size_t i = 0; i < lq; i++) {
        const ATT_T *qi = q + (ptrdiff_t)i * qsr;
        ATT_T *si = s + i * lds;
        for (size_t j = 0; j < lk; j++) si[j] = (ATT_T)0;
        for (size_t c = 0; c < d; c++) {
            const ATT_T a = qi[c];
            const ATT_T *kc = kt + c * ldk;
            for (size_t j = 0; j < lk; j++) si[j] += a * kc[j];
        }
    }
}

/* O[i][0..dv) = sum_j P[i][j] * V[j][0..dv) for i < Lq; O row stride osr. */
ATT_ATTR static void ATT_NAME(pv)(size_t lq, size_t lk, size_t dv, const ATT_T *p, size_t ldp,
                                  const ATT_T *v, ptrdiff_t vsr, ATT_T *o, ptrdiff_t osr)
{
    for (size_t i = 0; i < lq; i++) {
        const ATT_T *pi = p + i * ldp;
        ATT_T *oi = o + (ptrdiff_t)i * osr;
        for (size_t c = 0; c < dv; c++) oi[c] = (ATT_T)0;
        for (size_t j = 0; j < lk; j++) {
            const ATT_T a = pi[j];
            const ATT_T *vj = v + (ptrdiff_t)j * vsr;
            for (size_t c = 0; c < dv; c++) oi[c] += a * vj[c];
        }
    }
}

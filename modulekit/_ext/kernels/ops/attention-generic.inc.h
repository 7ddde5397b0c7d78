/* Portable per-head attention blocks, written so that the inner loops vectorise (unit stride,
 * no reductions); included by ops-attention.c once for the generic build and once inside an
 * AVX2+FMA target region (ATT_SUFFIX names the copy). */

/* S[i][0..Lk) = sum_c Q[i][c] * Kt[c][0..Lk) for i < Lq; Kt row stride ldk. */
ATT_ATTR static void ATT_NAME(qk)(size_t lq, size_t lk, size_t d, const float *q, ptrdiff_t qsr,
                                  const float *kt, size_t ldk, float *s, size_t lds)
{
    for (size_t i = 0; i < lq; i++) {
        const float *qi = q + (ptrdiff_t)i * qsr;
        float *si = s + i * lds;
        for (size_t j = 0; j < lk; j++) si[j] = 0.0f;
        for (size_t c = 0; c < d; c++) {
            const float a = qi[c];
            const float *kc = kt + c * ldk;
            for (size_t j = 0; j < lk; j++) si[j] += a * kc[j];
        }
    }
}

/* O[i][0..dv) = sum_j P[i][j] * V[j][0..dv) for i < Lq; O row stride osr. */
ATT_ATTR static void ATT_NAME(pv)(size_t lq, size_t lk, size_t dv, const float *p, size_t ldp,
                                  const float *v, ptrdiff_t vsr, float *o, ptrdiff_t osr)
{
    for (size_t i = 0; i < lq; i++) {
        const float *pi = p + i * ldp;
        float *oi = o + (ptrdiff_t)i * osr;
        for (size_t c = 0; c < dv; c++) oi[c] = 0.0f;
        for (size_t j = 0; j < lk; j++) {
            const float a = pi[j];
            const float *vj = v + (ptrdiff_t)j * vsr;
            for (size_t c = 0; c < dv; c++) oi[c] += a * vj[c];
        }
    }
}

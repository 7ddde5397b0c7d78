/* Depthwise convolution kernels, AVX2+FMA (8 lanes): see f32-dwconv-avx512.c. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include "conv-simd.h"

MK_T256 static inline __m256i dw_mask256(int n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

MK_T256 void mk_f32_dwconv_row_avx2(int T, const float *ph, const ptrdiff_t *toff,
                                    const float *w, float bias, int OW, float *out,
                                    const float *res, int act) {
    int ow = 0;
    for (; ow + 16 <= OW; ow += 16) {
        __m256 a0 = _mm256_set1_ps(bias), a1 = a0;
        for (int t = 0; t < T; t++) {
            const __m256 wt = _mm256_broadcast_ss(w + t);
            const float *p = ph + toff[t] + ow;
            a0 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(p), a0);
            a1 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(p + 8), a1);
        }
        if (res) {
            a0 = _mm256_add_ps(a0, _mm256_loadu_ps(res + ow));
            a1 = _mm256_add_ps(a1, _mm256_loadu_ps(res + ow + 8));
        }
        _mm256_storeu_ps(out + ow, mk_act_f32x8(a0, act, 0.0f, 0.0f));
        _mm256_storeu_ps(out + ow + 8, mk_act_f32x8(a1, act, 0.0f, 0.0f));
    }
    for (; ow < OW; ow += 8) {
        const __m256i m = dw_mask256(OW - ow);
        __m256 a0 = _mm256_set1_ps(bias);
        for (int t = 0; t < T; t++)
            a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(w + t),
                                 _mm256_maskload_ps(ph + toff[t] + ow, m), a0);
        if (res) a0 = _mm256_add_ps(a0, _mm256_maskload_ps(res + ow, m));
        _mm256_maskstore_ps(out + ow, m, mk_act_f32x8(a0, act, 0.0f, 0.0f));
    }
}

MK_T256 void mk_f32_grid_rows_avx2(const float *grid, int Wq, int OH, int OW, float *out,
                                   const float *res, int act) {
    for (int oh = 0; oh < OH; oh++) {
        const float *gr = grid + (ptrdiff_t)oh * Wq;
        float *o = out + (ptrdiff_t)oh * OW;
        const float *r = res ? res + (ptrdiff_t)oh * OW : NULL;
        for (int ow = 0; ow < OW; ow += 8) {
            const __m256i m = dw_mask256(OW - ow);
            __m256 v = _mm256_maskload_ps(gr + ow, m);
            if (r) v = _mm256_add_ps(v, _mm256_maskload_ps(r + ow, m));
            _mm256_maskstore_ps(o + ow, m, mk_act_f32x8(v, act, 0.0f, 0.0f));
        }
    }
}

#endif /* MK_X86 */

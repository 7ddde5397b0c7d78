/* Depthwise convolution kernels, AVX-512 (16 lanes): a run of output-grid lanes of one channel
 * from its phase image (any KH x KW, stride and dilation: the phase image turns stride into
 * unit-stride reads), and the grid-rows-to-output epilogue (+ residual, activation). */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include "conv-simd.h"

/* ph: channel phase image; toff[t]: offset of tap t; lanes [0, OW) of the run: out[i] =
 * bias + sum_t w[t] * ph[toff[t] + i] (+ res[i]), then the activation. */
MK_T512 void mk_f32_dwconv_row_avx512(int T, const float *ph, const ptrdiff_t *toff,
                                      const float *w, float bias, int OW, float *out,
                                      const float *res, int act) {
    int ow = 0;
    for (; ow + 32 <= OW; ow += 32) {
        __m512 a0 = _mm512_set1_ps(bias), a1 = a0;
        for (int t = 0; t < T; t++) {
            const __m512 wt = _mm512_set1_ps(w[t]);
            const float *p = ph + toff[t] + ow;
            a0 = _mm512_fmadd_ps(wt, _mm512_loadu_ps(p), a0);
            a1 = _mm512_fmadd_ps(wt, _mm512_loadu_ps(p + 16), a1);
        }
        if (res) {
            a0 = _mm512_add_ps(a0, _mm512_loadu_ps(res + ow));
            a1 = _mm512_add_ps(a1, _mm512_loadu_ps(res + ow + 16));
        }
        _mm512_storeu_ps(out + ow, mk_act_f32x16(a0, act, 0.0f, 0.0f));
        _mm512_storeu_ps(out + ow + 16, mk_act_f32x16(a1, act, 0.0f, 0.0f));
    }
    for (; ow < OW; ow += 16) {
        const __mmask16 m = (__mmask16)mk_seg_mask(0, OW - ow, 0, 16);
        __m512 a0 = _mm512_set1_ps(bias);
        for (int t = 0; t < T; t++)
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(w[t]),
                                 _mm512_maskz_loadu_ps(m, ph + toff[t] + ow), a0);
        if (res) a0 = _mm512_add_ps(a0, _mm512_maskz_loadu_ps(m, res + ow));
        _mm512_mask_storeu_ps(out + ow, m, mk_act_f32x16(a0, act, 0.0f, 0.0f));
    }
}

/* Rows of the output grid (width Wq) to the output (width OW): + residual, activation. */
MK_T512 void mk_f32_grid_rows_avx512(const float *grid, int Wq, int OH, int OW, float *out,
                                     const float *res, int act) {
    for (int oh = 0; oh < OH; oh++) {
        const float *gr = grid + (ptrdiff_t)oh * Wq;
        float *o = out + (ptrdiff_t)oh * OW;
        const float *r = res ? res + (ptrdiff_t)oh * OW : NULL;
        for (int ow = 0; ow < OW; ow += 16) {
            const __mmask16 m = (__mmask16)mk_seg_mask(0, OW - ow, 0, 16);
            __m512 v = _mm512_maskz_loadu_ps(m, gr + ow);
            if (r) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, r + ow));
            _mm512_mask_storeu_ps(o + ow, m, mk_act_f32x16(v, act, 0.0f, 0.0f));
        }
    }
}

#endif /* MK_X86 */

/* AVX-512 per-head attention blocks: 4 rows x 32 columns of accumulators (8 zmm), masked
 * column tails. Kt is the head's keys transposed (d x ldk, ldk a multiple of 32, zero-padded),
 * so S = Q Kt streams Kt rows; O = P V streams V rows in place. */
#include <immintrin.h>

#include "ops.h"

#define MK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

static inline __mmask16 cols_mask(size_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u); }

MK_AVX512 void mk_attention_qk_f32_avx512(size_t lq, size_t lk, size_t d, const float *q,
                                          ptrdiff_t qsr, const float *kt, size_t ldk, float *s,
                                          size_t lds)
{
    for (size_t j = 0; j < lk; j += 32) {
        const __mmask16 m0 = cols_mask(lk - j), m1 = lk - j > 16 ? cols_mask(lk - j - 16) : 0;
        size_t i = 0;
        for (; i + 4 <= lq; i += 4) {
            const float *q0 = q + (ptrdiff_t)i * qsr, *q1 = q0 + qsr, *q2 = q1 + qsr,
                        *q3 = q2 + qsr;
            __m512 a00 = _mm512_setzero_ps(), a01 = _mm512_setzero_ps();
            __m512 a10 = _mm512_setzero_ps(), a11 = _mm512_setzero_ps();
            __m512 a20 = _mm512_setzero_ps(), a21 = _mm512_setzero_ps();
            __m512 a30 = _mm512_setzero_ps(), a31 = _mm512_setzero_ps();
            for (size_t c = 0; c < d; c++) {
                const __m512 k0 = _mm512_load_ps(kt + c * ldk + j);
                const __m512 k1 = _mm512_load_ps(kt + c * ldk + j + 16);
                __m512 b = _mm512_set1_ps(q0[c]);
                a00 = _mm512_fmadd_ps(b, k0, a00);
                a01 = _mm512_fmadd_ps(b, k1, a01);
                b = _mm512_set1_ps(q1[c]);
                a10 = _mm512_fmadd_ps(b, k0, a10);
                a11 = _mm512_fmadd_ps(b, k1, a11);
                b = _mm512_set1_ps(q2[c]);
                a20 = _mm512_fmadd_ps(b, k0, a20);
                a21 = _mm512_fmadd_ps(b, k1, a21);
                b = _mm512_set1_ps(q3[c]);
                a30 = _mm512_fmadd_ps(b, k0, a30);
                a31 = _mm512_fmadd_ps(b, k1, a31);
            }
            float *s0 = s + i * lds + j;
            _mm512_mask_storeu_ps(s0, m0, a00);
            _mm512_mask_storeu_ps(s0 + 16, m1, a01);
            _mm512_mask_storeu_ps(s0 + lds, m0, a10);
            _mm512_mask_storeu_ps(s0 + lds + 16, m1, a11);
            _mm512_mask_storeu_ps(s0 + 2 * lds, m0, a20);
            _mm512_mask_storeu_ps(s0 + 2 * lds + 16, m1, a21);
            _mm512_mask_storeu_ps(s0 + 3 * lds, m0, a30);
            _mm512_mask_storeu_ps(s0 + 3 * lds + 16, m1, a31);
        }
        for (; i < lq; i++) {
            const float *qi = q + (ptrdiff_t)i * qsr;
            __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
            for (size_t c = 0; c < d; c++) {
                const __m512 b = _mm512_set1_ps(qi[c]);
                a0 = _mm512_fmadd_ps(b, _mm512_load_ps(kt + c * ldk + j), a0);
                a1 = _mm512_fmadd_ps(b, _mm512_load_ps(kt + c * ldk + j + 16), a1);
            }
            _mm512_mask_storeu_ps(s + i * lds + j, m0, a0);
            _mm512_mask_storeu_ps(s + i * lds + j + 16, m1, a1);
        }
    }
}

MK_AVX512 void mk_attention_pv_f32_avx512(size_t lq, size_t lk, size_t dv, const float *p,
                                          size_t ldp, const float *v, ptrdiff_t vsr, float *o,
                                          ptrdiff_t osr)
{
    for (size_t c0 = 0; c0 < dv; c0 += 32) {
        const __mmask16 m0 = cols_mask(dv - c0), m1 = dv - c0 > 16 ? cols_mask(dv - c0 - 16) : 0;
        size_t i = 0;
        for (; i + 4 <= lq; i += 4) {
            const float *p0 = p + i * ldp, *p1 = p0 + ldp, *p2 = p1 + ldp, *p3 = p2 + ldp;
            __m512 a00 = _mm512_setzero_ps(), a01 = _mm512_setzero_ps();
            __m512 a10 = _mm512_setzero_ps(), a11 = _mm512_setzero_ps();
            __m512 a20 = _mm512_setzero_ps(), a21 = _mm512_setzero_ps();
            __m512 a30 = _mm512_setzero_ps(), a31 = _mm512_setzero_ps();
            for (size_t j = 0; j < lk; j++) {
                const float *vj = v + (ptrdiff_t)j * vsr + c0;
                const __m512 v0 = _mm512_maskz_loadu_ps(m0, vj);
                const __m512 v1 = _mm512_maskz_loadu_ps(m1, vj + 16);
                __m512 b = _mm512_set1_ps(p0[j]);
                a00 = _mm512_fmadd_ps(b, v0, a00);
                a01 = _mm512_fmadd_ps(b, v1, a01);
                b = _mm512_set1_ps(p1[j]);
                a10 = _mm512_fmadd_ps(b, v0, a10);
                a11 = _mm512_fmadd_ps(b, v1, a11);
                b = _mm512_set1_ps(p2[j]);
                a20 = _mm512_fmadd_ps(b, v0, a20);
                a21 = _mm512_fmadd_ps(b, v1, a21);
                b = _mm512_set1_ps(p3[j]);
                a30 = _mm512_fmadd_ps(b, v0, a30);
                a31 = _mm512_fmadd_ps(b, v1, a31);
            }
            float *o0 = o + (ptrdiff_t)i * osr + c0;
            _mm512_mask_storeu_ps(o0, m0, a00);
            _mm512_mask_storeu_ps(o0 + 16, m1, a01);
            _mm512_mask_storeu_ps(o0 + osr, m0, a10);
            _mm512_mask_storeu_ps(o0 + osr + 16, m1, a11);
            _mm512_mask_storeu_ps(o0 + 2 * osr, m0, a20);
            _mm512_mask_storeu_ps(o0 + 2 * osr + 16, m1, a21);
            _mm512_mask_storeu_ps(o0 + 3 * osr, m0, a30);
            _mm512_mask_storeu_ps(o0 + 3 * osr + 16, m1, a31);
        }
        for (; i < lq; i++) {
            const float *pi = p + i * ldp;
            __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
            for (size_t j = 0; j < lk; j++) {
                const float *vj = v + (ptrdiff_t)j * vsr + c0;
                const __m512 b = _mm512_set1_ps(pi[j]);
                a0 = _mm512_fmadd_ps(b, _mm512_maskz_loadu_ps(m0, vj), a0);
                a1 = _mm512_fmadd_ps(b, _mm512_maskz_loadu_ps(m1, vj + 16), a1);
            }
            _mm512_mask_storeu_ps(o + (ptrdiff_t)i * osr + c0, m0, a0);
            _mm512_mask_storeu_ps(o + (ptrdiff_t)i * osr + c0 + 16, m1, a1);
        }
    }
}

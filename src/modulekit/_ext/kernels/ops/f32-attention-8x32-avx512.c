/* AVX-512 per-head attention blocks: up to 8 rows x 32 columns of accumulators (16 zmm),
 * masked column tails; the row block shrinks 8 -> 4 -> 1 at the end. Kt is the head's keys
 * transposed (d x ldk, ldk a multiple of 32, zero-padded), so S = Q Kt streams Kt rows;
 * O = P V streams V rows (the driver copies V_h contiguous first). */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <immintrin.h>
#include <limits.h>

#include "ops.h"

#define MK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define MK_INLINE static inline __attribute__((always_inline))

static inline __mmask16 cols_mask(size_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u); }

/* S[i0 .. i0+R)[j .. j+32) (R a constant: the loops unroll, acc stays in registers) */
MK_AVX512 MK_INLINE void qk_rows(const int R, size_t d, const float *q, ptrdiff_t qsr,
                                 const float *kt, size_t ldk, float *s, size_t lds,
                                 __mmask16 m0, __mmask16 m1)
{
    __m512 a[8][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) a[r][0] = a[r][1] = _mm512_setzero_ps();
    for (size_t c = 0; c < d; c++) {
        const __m512 k0 = _mm512_load_ps(kt + c * ldk);
        const __m512 k1 = _mm512_load_ps(kt + c * ldk + 16);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m512 b = _mm512_set1_ps(q[(ptrdiff_t)r * qsr + (ptrdiff_t)c]);
            a[r][0] = _mm512_fmadd_ps(b, k0, a[r][0]);
            a[r][1] = _mm512_fmadd_ps(b, k1, a[r][1]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        _mm512_mask_storeu_ps(s + r * lds, m0, a[r][0]);
        _mm512_mask_storeu_ps(s + r * lds + 16, m1, a[r][1]);
    }
}

MK_AVX512 void mk_attention_qk_f32_avx512(size_t lq, size_t lk, size_t d, const float *q,
                                          ptrdiff_t qsr, const float *kt, size_t ldk, float *s,
                                          size_t lds)
{
    for (size_t j = 0; j < lk; j += 32) {
        const __mmask16 m0 = cols_mask(lk - j), m1 = lk - j > 16 ? cols_mask(lk - j - 16) : 0;
        size_t i = 0;
        for (; i + 8 <= lq; i += 8)
            qk_rows(8, d, q + (ptrdiff_t)i * qsr, qsr, kt + j, ldk, s + i * lds + j, lds, m0, m1);
        if (i + 4 <= lq) {
            qk_rows(4, d, q + (ptrdiff_t)i * qsr, qsr, kt + j, ldk, s + i * lds + j, lds, m0, m1);
            i += 4;
        }
        for (; i < lq; i++)
            qk_rows(1, d, q + (ptrdiff_t)i * qsr, qsr, kt + j, ldk, s + i * lds + j, lds, m0, m1);
    }
}

/* O[i0 .. i0+R)[c0 .. c0+32) */
MK_AVX512 MK_INLINE void pv_rows(const int R, size_t lk, const float *p, size_t ldp,
                                 const float *v, ptrdiff_t vsr, float *o, ptrdiff_t osr,
                                 __mmask16 m0, __mmask16 m1)
{
    __m512 a[8][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) a[r][0] = a[r][1] = _mm512_setzero_ps();
    for (size_t j = 0; j < lk; j++) {
        const float *vj = v + (ptrdiff_t)j * vsr;
        const __m512 v0 = _mm512_maskz_loadu_ps(m0, vj);
        const __m512 v1 = _mm512_maskz_loadu_ps(m1, vj + 16);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m512 b = _mm512_set1_ps(p[r * ldp + j]);
            a[r][0] = _mm512_fmadd_ps(b, v0, a[r][0]);
            a[r][1] = _mm512_fmadd_ps(b, v1, a[r][1]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        _mm512_mask_storeu_ps(o + r * osr, m0, a[r][0]);
        _mm512_mask_storeu_ps(o + r * osr + 16, m1, a[r][1]);
    }
}

MK_AVX512 void mk_attention_pv_f32_avx512(size_t lq, size_t lk, size_t dv, const float *p,
                                          size_t ldp, const float *v, ptrdiff_t vsr, float *o,
                                          ptrdiff_t osr)
{
    for (size_t c0 = 0; c0 < dv; c0 += 32) {
        const __mmask16 m0 = cols_mask(dv - c0), m1 = dv - c0 > 16 ? cols_mask(dv - c0 - 16) : 0;
        size_t i = 0;
        for (; i + 8 <= lq; i += 8)
            pv_rows(8, lk, p + i * ldp, ldp, v + c0, vsr, o + (ptrdiff_t)i * osr + c0, osr, m0, m1);
        if (i + 4 <= lq) {
            pv_rows(4, lk, p + i * ldp, ldp, v + c0, vsr, o + (ptrdiff_t)i * osr + c0, osr, m0, m1);
            i += 4;
        }
        for (; i < lq; i++)
            pv_rows(1, lk, p + i * ldp, ldp, v + c0, vsr, o + (ptrdiff_t)i * osr + c0, osr, m0, m1);
    }
}

/* In-register transpose of 16 rows of 16 floats (unpack, shuffle, two 128-bit lane rounds). */
MK_AVX512 MK_INLINE void transpose16(__m512 r[16])
{
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 16; g += 4) {
        u[g] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
        u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xEE);
        u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
        u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
    }
    for (int h = 0; h < 16; h += 8)
        for (int i = 0; i < 4; i++) {
            t[h + i] = _mm512_shuffle_f32x4(u[h + i], u[h + 4 + i], 0x88);
            t[h + 4 + i] = _mm512_shuffle_f32x4(u[h + i], u[h + 4 + i], 0xDD);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
    }
}

/* Kt[c][j] = scale * K[j][c] for j < lk, c < d (K rows ksr apart): 16 x 16 blocks transposed
 * in registers; tails (a partial block of keys or of head dimensions) by one 16-lane gather
 * per (c, 16 keys). The padding columns lk .. ldk are left as they are (zero). */
MK_AVX512 void mk_attention_pack_kt_f32_avx512(size_t lk, size_t d, const float *k,
                                               ptrdiff_t ksr, float scale, float *kt, size_t ldk)
{
    if (ksr <= 0 || ksr > INT_MAX / 16) { /* gather offsets are 32-bit */
        for (size_t j = 0; j < lk; j++)
            for (size_t c = 0; c < d; c++) kt[c * ldk + j] = k[(ptrdiff_t)j * ksr + (ptrdiff_t)c] * scale;
        return;
    }
    const __m512 vs = _mm512_set1_ps(scale);
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                             11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)ksr));
    const size_t d16 = d / 16 * 16;
    for (size_t j = 0; j < lk; j += 16) {
        const __mmask16 m = cols_mask(lk - j);
        const float *kj = k + (ptrdiff_t)j * ksr;
        size_t c0 = 0;
        if (lk - j >= 16) {
            for (; c0 < d16; c0 += 16) {
                __m512 r[16];
                for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(kj + (ptrdiff_t)i * ksr + c0);
                transpose16(r);
                for (int i = 0; i < 16; i++)
                    _mm512_storeu_ps(kt + (c0 + (size_t)i) * ldk + j, _mm512_mul_ps(r[i], vs));
            }
        }
        for (size_t c = c0; c < d; c++) {
            const __m512 g = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, kj + c, 4);
            _mm512_mask_storeu_ps(kt + c * ldk + j, m, _mm512_mul_ps(g, vs));
        }
    }
}

#endif /* MK_X86 */

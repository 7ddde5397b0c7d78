/* AVX512-BF16 attention blocks (float32_matmul_precision "medium"): the float32 blocks'
 * shape (f32-attention-8x32-avx512.c: up to 8 rows x 32 columns of float32 accumulators, the
 * row block shrinking 8 -> 4 -> 1) with each vdpbf16ps taking two k at once. Operands as
 * 32-bit words of bfloat16 pairs (common/bf16-pairs-avx512bf16.h):
 *   q16: Q_h rows, word p = (q[2p], q[2p + 1])        (mk_attention_bf16_rows)
 *   kt16: (scale K_h^T) row pairs, word p * ldk + j = (kt[2p][j], kt[2p + 1][j])
 *   p16: the softmax rows, word p = (P[i][2p], P[i][2p + 1])   (mk_attention_bf16_rows)
 *   v16: V_h row pairs, word p * ldv + c = (v[2p][c], v[2p + 1][c])  (mk_attention_bf16_pairs)
 * S and O are float32. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include "common/bf16-pairs-avx512bf16.h"
#include "ops.h"

#define MK_INLINE static inline __attribute__((always_inline))

static inline __mmask16 cols_mask(size_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

MK_TARGET_AVX512BF16 void mk_attention_bf16_rows(size_t rows, size_t n, const float *x,
                                                 ptrdiff_t xsr, uint32_t *dst, size_t ldd) {
    for (size_t i = 0; i < rows; i++) {
        const float *xi = x + (ptrdiff_t)i * xsr;
        uint32_t *di = dst + i * ldd;
        for (size_t c = 0; c < n; c += 32) {
            const size_t left = n - c < 32 ? n - c : 32;
            const __m512i w = mk_bf16_row32(xi + c, left);
            const size_t words = (left + 1) / 2;
            _mm512_mask_storeu_epi32(di + c / 2, cols_mask(words), w);
        }
    }
}

MK_TARGET_AVX512BF16 void mk_attention_bf16_pairs(size_t rows, size_t cols, const float *x,
                                                  ptrdiff_t xsr, uint32_t *dst, size_t ldd) {
    for (size_t p = 0; p < (rows + 1) / 2; p++) {
        const float *r0 = x + (ptrdiff_t)(2 * p) * xsr;
        const float *r1 = 2 * p + 1 < rows ? r0 + xsr : NULL;
        for (size_t c = 0; c < cols; c += 16) {
            const __mmask16 m = cols_mask(cols - c);
            const __m512 lo = _mm512_maskz_loadu_ps(m, r0 + c);
            const __m512 hi = r1 ? _mm512_maskz_loadu_ps(m, r1 + c) : _mm512_setzero_ps();
            _mm512_mask_storeu_epi32(dst + p * ldd + c, m, mk_bf16_pairs16(lo, hi));
        }
    }
}

/* acc[r][0..1] += sum over pairs p < np of a[r * lda + p] * b[p * ldb .. + 32) */
MK_TARGET_AVX512BF16 MK_INLINE void dot_rows(const int R, size_t np, const uint32_t *a,
                                             size_t lda, const uint32_t *b, size_t ldb,
                                             __mmask16 m0, __mmask16 m1, float *c,
                                             ptrdiff_t csr) {
    __m512 acc[8][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (size_t p = 0; p < np; p++) {
        const __m512bh b0 = (__m512bh)_mm512_maskz_loadu_epi32(m0, b + p * ldb);
        const __m512bh b1 = (__m512bh)_mm512_maskz_loadu_epi32(m1, b + p * ldb + 16);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m512bh ar = (__m512bh)_mm512_set1_epi32((int)a[r * lda + p]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        _mm512_mask_storeu_ps(c + r * csr, m0, acc[r][0]);
        _mm512_mask_storeu_ps(c + r * csr + 16, m1, acc[r][1]);
    }
}

/* C[rows x cols] = A B over np pairs: A rows lda words apart, B pair rows ldb words apart */
MK_TARGET_AVX512BF16 void mk_attention_dot_bf16(size_t rows, size_t cols, size_t np,
                                                const uint32_t *a, size_t lda,
                                                const uint32_t *b, size_t ldb, float *c,
                                                ptrdiff_t csr) {
    for (size_t j = 0; j < cols; j += 32) {
        const __mmask16 m0 = cols_mask(cols - j), m1 = cols - j > 16 ? cols_mask(cols - j - 16) : 0;
        size_t i = 0;
        for (; i + 8 <= rows; i += 8)
            dot_rows(8, np, a + i * lda, lda, b + j, ldb, m0, m1, c + (ptrdiff_t)i * csr + j, csr);
        if (i + 4 <= rows) {
            dot_rows(4, np, a + i * lda, lda, b + j, ldb, m0, m1, c + (ptrdiff_t)i * csr + j, csr);
            i += 4;
        }
        for (; i < rows; i++)
            dot_rows(1, np, a + i * lda, lda, b + j, ldb, m0, m1, c + (ptrdiff_t)i * csr + j, csr);
    }
}

#endif /* MK_X86 */

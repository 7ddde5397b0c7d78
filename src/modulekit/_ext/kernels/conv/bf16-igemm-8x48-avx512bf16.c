/* bfloat16-compute implicit GEMM tiles, AVX512-BF16 (float32_matmul_precision "medium"):
 * 8 output channels x 48 / 32 / 16 output pixels, one template (the float32 igemm tiles' shape,
 * f32-igemm-8x48-avx512.c, and their epilogue, mk_igemm_store_8xnv).
 *
 * A tile's B (its K x NR window values) is packed once into bfloat16 pairs by
 * mk_bf16_conv_pack_tile__avx512bf16 (also the AMX tile's packer) and then multiplied by every
 * weight panel: 32-bit word
 * p * NR + lane holds B[2p, lane] (low half) and B[2p + 1, lane] (high half), rounded to
 * nearest even by vcvtne2ps2bf16 (the GEMM engine's activation rounding: float32 denormals
 * flush to zero). Each vdpbf16ps multiplies one broadcast weight pair (output channel r, k
 * = 2p, 2p + 1) by 16 lanes of pairs and adds both products to float32 accumulators. See
 * conv.h for the operands. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include "common/bf16-pairs-avx512bf16.h"
#include "conv-simd.h"

#define MK_TBF16 MK_TARGET_AVX512BF16

MK_TBF16 void mk_bf16_conv_pack_tile__avx512bf16(size_t K, size_t kp, const float *b,
                                                 const ptrdiff_t *koff, int nlanes, int nr,
                                                 uint32_t *dst) {
    const int nv = nr / 16;
    __mmask16 m[3];
    for (int j = 0; j < 3; j++) m[j] = (__mmask16)mk_seg_mask(0, nlanes, j, 16);
    const size_t kpk = (K + 1) / 2;
    for (size_t p = 0; p < kpk; p++) {
        const float *r0 = b + koff[2 * p];
        const float *r1 = 2 * p + 1 < K ? b + koff[2 * p + 1] : NULL;
        for (int j = 0; j < nv; j++) {
            const __m512 lo = _mm512_maskz_loadu_ps(m[j], r0 + 16 * j);
            const __m512 hi = r1 ? _mm512_maskz_loadu_ps(m[j], r1 + 16 * j) : _mm512_setzero_ps();
            _mm512_storeu_si512(dst + p * nr + 16 * j, mk_bf16_pairs16(lo, hi));
        }
    }
    for (size_t p = kpk * nr; p < kp * nr; p += 16) /* the padding rows: zero */
        _mm512_storeu_si512(dst + p, _mm512_setzero_si512());
}

MK_TBF16 void mk_bf16_pair_plane__avx512bf16(const float *lo, const float *hi, size_t n,
                                            uint32_t *dst) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 l = _mm512_loadu_ps(lo + i);
        const __m512 h = hi ? _mm512_loadu_ps(hi + i) : _mm512_setzero_ps();
        _mm512_storeu_si512(dst + i, mk_bf16_pairs16(l, h));
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        const __m512 l = _mm512_maskz_loadu_ps(m, lo + i);
        const __m512 h = hi ? _mm512_maskz_loadu_ps(m, hi + i) : _mm512_setzero_ps();
        _mm512_mask_storeu_epi32(dst + i, m, mk_bf16_pairs16(l, h));
    }
}

__attribute__((always_inline)) MK_TBF16 static inline void
bf16_igemm_8xNV(const int NV, size_t taps, size_t kpt, const ptrdiff_t *tapoff, size_t ldb,
                const uint32_t *a, const uint32_t *b, int mrows, float *c, ptrdiff_t c_rs,
                const float *res, const mk_seg *segs, int nseg, int act) {
    const float *bias = (const float *)a;
    __m512 acc[8][3];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        const __m512 v = _mm512_set1_ps(bias[r]);
        acc[r][0] = v;
        acc[r][1] = v;
        acc[r][2] = v;
    }
    a += 8;
    for (size_t t = 0; t < taps; t++) {
        const uint32_t *bt = b + tapoff[t];
        for (size_t p = 0; p < kpt; p++) {
            const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bt);
            const __m512bh b1 = NV > 1 ? (__m512bh)_mm512_loadu_si512(bt + 16) : b0;
            const __m512bh b2 = NV > 2 ? (__m512bh)_mm512_loadu_si512(bt + 32) : b0;
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                const __m512bh ar = (__m512bh)_mm512_set1_epi32((int)a[r]);
                acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
                if (NV > 1) acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
                if (NV > 2) acc[r][2] = _mm512_dpbf16_ps(acc[r][2], ar, b2);
            }
            a += 8;
            bt += ldb;
        }
    }
    mk_igemm_store_8xnv(NV, acc, mrows, c, c_rs, res, segs, nseg, act);
}

#define MK_BF16_IGEMM(NV, NR)                                                                  \
    MK_TBF16 void mk_bf16_igemm_8x##NR##__avx512bf16(                                          \
        size_t ntile, size_t bstep, size_t taps, size_t kpt, const ptrdiff_t *tapoff,          \
        size_t ldb, const uint32_t *a, const uint32_t *b, int mrows, float *c, ptrdiff_t c_rs, \
        const float *res, const mk_seg (*segs)[MK_MAX_SEGS], const int *nseg, int act) {       \
        for (size_t j = 0; j < ntile; j++)                                                     \
            bf16_igemm_8xNV(NV, taps, kpt, tapoff, ldb, a, b + j * bstep, mrows, c, c_rs, res, \
                            segs[j], nseg[j], act);                                            \
    }
MK_BF16_IGEMM(3, 48)
MK_BF16_IGEMM(2, 32)
MK_BF16_IGEMM(1, 16)

#endif /* MK_X86 */

/* float32 indirect-GEMM microkernel, AVX2+FMA: an 8-channel panel as two halves of
 * 4 output channels x 24 output pixels (3 ymm per row, 12 accumulators). See conv.h. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include "conv-simd.h"

/* software prefetch distance of the packed panel (floats), as the AVX-512 kernels */
#define MK_IGEMM_PREFETCH 2048

MK_T256 static inline __m256i mk_mask256(unsigned bits) {
    const __m256i idx = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    __m256i b = _mm256_set1_epi32((int)bits);
    return _mm256_cmpeq_epi32(_mm256_and_si256(b, idx), idx);
}

/* One k step: acc[r][j] += a[r] * bj for the 4 rows (inlined, so the accumulators stay in
 * registers). */
MK_T256 static inline __attribute__((always_inline)) void fma_4rows(__m256 acc[4][3],
                                                                    const float *a, __m256 b0,
                                                                    __m256 b1, __m256 b2) {
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        __m256 ar = _mm256_broadcast_ss(a + r);
        acc[r][0] = _mm256_fmadd_ps(ar, b0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(ar, b1, acc[r][1]);
        acc[r][2] = _mm256_fmadd_ps(ar, b2, acc[r][2]);
    }
}

MK_T256 static void igemm_4x24(size_t K, const float *a, const float *b, const ptrdiff_t *koff,
                               const ptrdiff_t *voff, int nlanes, int mrows, float *c,
                               ptrdiff_t c_rs, const float *res, const mk_seg *segs, int nseg,
                               int act) {
    __m256 acc[4][3];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        __m256 bias = _mm256_set1_ps(a[r]);
        acc[r][0] = bias;
        acc[r][1] = bias;
        acc[r][2] = bias;
    }
    a += 8;
    if (voff) { /* row vectors: vector j's lanes at voff[j], all 24 lanes computed */
        const ptrdiff_t o1 = voff[1], o2 = voff[2];
        for (size_t k = 0; k < K; k++) {
            const float *bk = b + koff[k];
            _mm_prefetch((const char *)(a + MK_IGEMM_PREFETCH), _MM_HINT_T0);
            __m256 b0 = _mm256_loadu_ps(bk);
            __m256 b1 = _mm256_loadu_ps(bk + o1);
            __m256 b2 = _mm256_loadu_ps(bk + o2);
            fma_4rows(acc, a, b0, b1, b2);
            a += 8;
        }
    } else if (nlanes >= 24) {
        for (size_t k = 0; k < K; k++) {
            const float *bk = b + koff[k];
            _mm_prefetch((const char *)(a + MK_IGEMM_PREFETCH), _MM_HINT_T0);
            __m256 b0 = _mm256_loadu_ps(bk);
            __m256 b1 = _mm256_loadu_ps(bk + 8);
            __m256 b2 = _mm256_loadu_ps(bk + 16);
            fma_4rows(acc, a, b0, b1, b2);
            a += 8;
        }
    } else {
        __m256i m0 = mk_mask256(mk_seg_mask(0, nlanes, 0, 8));
        __m256i m1 = mk_mask256(mk_seg_mask(0, nlanes, 1, 8));
        __m256i m2 = mk_mask256(mk_seg_mask(0, nlanes, 2, 8));
        for (size_t k = 0; k < K; k++) {
            const float *bk = b + koff[k];
            _mm_prefetch((const char *)(a + MK_IGEMM_PREFETCH), _MM_HINT_T0);
            __m256 b0 = _mm256_maskload_ps(bk, m0);
            __m256 b1 = _mm256_maskload_ps(bk + 8, m1);
            __m256 b2 = _mm256_maskload_ps(bk + 16, m2);
            fma_4rows(acc, a, b0, b1, b2);
            a += 8;
        }
    }
    for (int s = 0; s < nseg; s++) {
        const int lo = segs[s].lo, hi = segs[s].hi;
        const ptrdiff_t off = segs[s].off;
#pragma GCC unroll 3
        for (int j = 0; j < 3; j++) {
            unsigned bits = mk_seg_mask(lo, hi, j, 8);
            if (!bits) continue;
            __m256i m = mk_mask256(bits);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) { /* constant bounds keep acc in registers */
                if (r >= mrows) break;
                __m256 v = acc[r][j];
                ptrdiff_t o = r * c_rs + off + 8 * j;
                if (res) v = _mm256_add_ps(v, _mm256_maskload_ps(res + o, m));
                v = mk_act_f32x8(v, act, 0.0f, 0.0f);
                _mm256_maskstore_ps(c + o, m, v);
            }
        }
    }
}

MK_T256 void mk_f32_igemm_8x24_avx2(size_t K, const float *a, const float *b,
                                    const ptrdiff_t *koff, const ptrdiff_t *voff, int nlanes,
                                    int mrows, float *c, ptrdiff_t c_rs, const float *res,
                                    const mk_seg *segs, int nseg, int act) {
    /* rows 0-3 then rows 4-7 of the panel: the half-panel view keeps bias and K x 8 strides */
    igemm_4x24(K, a, b, koff, voff, nlanes, mrows < 4 ? mrows : 4, c, c_rs, res, segs, nseg,
               act);
    if (mrows > 4) {
        /* a + 4: bias[4..7] and column 4 of each k-row (the kernel steps a by 8 per k) */
        igemm_4x24(K, a + 4, b, koff, voff, nlanes, mrows - 4, c + 4 * c_rs, c_rs,
                   res ? res + 4 * c_rs : NULL, segs, nseg, act);
    }
}

#endif /* MK_X86 */

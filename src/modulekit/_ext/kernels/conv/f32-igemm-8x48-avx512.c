/* float32 indirect-GEMM microkernels, AVX-512: 8 output channels x 48 output pixels (3 zmm
 * per row, 24 accumulators), 8 x 32 (2 zmm per row) for small maps and 8 x 16 (1 zmm per row,
 * 8 accumulators: just enough independent FMA chains) for the narrowest GEMMs (Winograd at
 * batch 1 on 14x14 and 7x7 maps: 16 and 4 tiles). One template, so the three stay one kernel.
 * See conv.h for the operands. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include "conv-simd.h"

/* software prefetch distance of the packed panel (floats: 8 KiB, 256 k-steps ahead), tuned
 * on ResNet-18's 512-channel layers at batch 1, whose weights stream from DRAM */
#define MK_IGEMM_PREFETCH 2048
/* software prefetch distance of the input rows (k steps): the rows of a k step are a jump away
 * from the previous step's (another channel, kernel row or stride phase), a pattern the
 * hardware prefetchers do not follow, and a tile's rows over all of K do not stay in L1 when
 * the kernel window has several taps (a stride-2 3x3 over 64 channels reads 4 phase planes:
 * about 90 KiB a 48-lane tile). Fetching the rows of step k + 16 (8 and 4 measured the same)
 * made ResNet-18's stride-2 3x3 layers at batch 1 on one thread 11-18% faster (56x56 input
 * 1022 -> 838 us, 28x28 1079 -> 937 us) and a DCGAN ConvTranspose2d's phases 5-7%, one Xeon
 * (Emerald Rapids). */
#define MK_IGEMM_B_PREFETCH 16

/* One k step: acc[r][j] += a[r] * bj for the 8 rows, NV vectors a row (inlined, so the
 * accumulators stay in registers). */
MK_T512 static inline __attribute__((always_inline)) void fma_8rows(const int NV,
                                                                    __m512 acc[8][3],
                                                                    const float *a, __m512 b0,
                                                                    __m512 b1, __m512 b2) {
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        __m512 ar = _mm512_set1_ps(a[r]);
        acc[r][0] = _mm512_fmadd_ps(ar, b0, acc[r][0]);
        if (NV > 1) acc[r][1] = _mm512_fmadd_ps(ar, b1, acc[r][1]);
        if (NV > 2) acc[r][2] = _mm512_fmadd_ps(ar, b2, acc[r][2]);
    }
}

/* The cache lines of one k step's NV vectors of input (NV + 1: the run is rarely aligned). */
static inline __attribute__((always_inline)) void prefetch_rows(const int NV, const float *bk) {
    const char *p = (const char *)bk;
    for (int v = 0; v <= NV; v++) _mm_prefetch(p + 64 * v, _MM_HINT_T0);
}

/* The same for row vectors: vector v's first and last lane at bk + o[v]. */
static inline __attribute__((always_inline)) void prefetch_vectors(const int NV, const float *bk,
                                                                   const ptrdiff_t o[3]) {
    for (int v = 0; v < NV; v++) {
        _mm_prefetch((const char *)(bk + o[v]), _MM_HINT_T0);
        _mm_prefetch((const char *)(bk + o[v] + 15), _MM_HINT_T0);
    }
}

MK_T512 static inline void igemm_8xNV(const int NV, size_t K, const float *a, const float *b,
                                      const ptrdiff_t *koff, const ptrdiff_t *voff,
                                      int nlanes, int mrows, float *c,
                                      ptrdiff_t c_rs, const float *res, const mk_seg *segs,
                                      int nseg, int act) {
    __m512 acc[8][3];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        __m512 bias = _mm512_set1_ps(a[r]);
        acc[r][0] = bias;
        acc[r][1] = bias;
        acc[r][2] = bias;
    }
    const int NR = 16 * NV;
    a += 8;
    if (voff) { /* row vectors: vector j's lanes at voff[j], all NR lanes computed */
        const ptrdiff_t o[3] = {0, NV > 1 ? voff[1] : 0, NV > 2 ? voff[2] : 0};
        for (size_t k = 0; k < K; k++) {
            const float *bk = b + koff[k];
            _mm_prefetch((const char *)(a + MK_IGEMM_PREFETCH), _MM_HINT_T0);
            if (k + MK_IGEMM_B_PREFETCH < K)
                prefetch_vectors(NV, b + koff[k + MK_IGEMM_B_PREFETCH], o);
            __m512 b0 = _mm512_loadu_ps(bk);
            __m512 b1 = NV > 1 ? _mm512_loadu_ps(bk + o[1]) : _mm512_setzero_ps();
            __m512 b2 = NV > 2 ? _mm512_loadu_ps(bk + o[2]) : _mm512_setzero_ps();
            fma_8rows(NV, acc, a, b0, b1, b2);
            a += 8;
        }
    } else if (nlanes >= NR) {
        for (size_t k = 0; k < K; k++) {
            const float *bk = b + koff[k];
            /* the packed panel streams from memory when the weights do not fit the caches
             * (deep layers at batch 1): fetch it MK_IGEMM_PREFETCH floats ahead */
            _mm_prefetch((const char *)(a + MK_IGEMM_PREFETCH), _MM_HINT_T0);
            if (k + MK_IGEMM_B_PREFETCH < K) prefetch_rows(NV, b + koff[k + MK_IGEMM_B_PREFETCH]);
            __m512 b0 = _mm512_loadu_ps(bk);
            __m512 b1 = NV > 1 ? _mm512_loadu_ps(bk + 16) : _mm512_setzero_ps();
            __m512 b2 = NV > 2 ? _mm512_loadu_ps(bk + 32) : _mm512_setzero_ps();
            fma_8rows(NV, acc, a, b0, b1, b2);
            a += 8;
        }
    } else {
        /* tail tile: masked loads never touch memory past the tile */
        __mmask16 m0 = (__mmask16)mk_seg_mask(0, nlanes, 0, 16);
        __mmask16 m1 = (__mmask16)mk_seg_mask(0, nlanes, 1, 16);
        __mmask16 m2 = (__mmask16)mk_seg_mask(0, nlanes, 2, 16);
        for (size_t k = 0; k < K; k++) {
            const float *bk = b + koff[k];
            _mm_prefetch((const char *)(a + MK_IGEMM_PREFETCH), _MM_HINT_T0);
            if (k + MK_IGEMM_B_PREFETCH < K) prefetch_rows(NV, b + koff[k + MK_IGEMM_B_PREFETCH]);
            __m512 b0 = _mm512_maskz_loadu_ps(m0, bk);
            __m512 b1 = NV > 1 ? _mm512_maskz_loadu_ps(m1, bk + 16) : _mm512_setzero_ps();
            __m512 b2 = NV > 2 ? _mm512_maskz_loadu_ps(m2, bk + 32) : _mm512_setzero_ps();
            fma_8rows(NV, acc, a, b0, b1, b2);
            a += 8;
        }
    }
    /* epilogue: (+ residual), activation, masked stores per output-row segment */
    mk_igemm_store_8xnv(NV, acc, mrows, c, c_rs, res, segs, nseg, act);
}

MK_T512 void mk_f32_igemm_8x48_avx512(size_t K, const float *a, const float *b,
                                      const ptrdiff_t *koff, const ptrdiff_t *voff, int nlanes,
                                      int mrows, float *c, ptrdiff_t c_rs, const float *res,
                                      const mk_seg *segs, int nseg, int act) {
    igemm_8xNV(3, K, a, b, koff, voff, nlanes, mrows, c, c_rs, res, segs, nseg, act);
}

/* 8 x 32 (16 accumulators): the tile for small output maps, where 48 lanes would waste work */
MK_T512 void mk_f32_igemm_8x32_avx512(size_t K, const float *a, const float *b,
                                      const ptrdiff_t *koff, const ptrdiff_t *voff, int nlanes,
                                      int mrows, float *c, ptrdiff_t c_rs, const float *res,
                                      const mk_seg *segs, int nseg, int act) {
    igemm_8xNV(2, K, a, b, koff, voff, nlanes, mrows, c, c_rs, res, segs, nseg, act);
}

/* 8 x 16 (8 accumulators): GEMMs of at most 16 columns, where wider tiles compute padding */
MK_T512 void mk_f32_igemm_8x16_avx512(size_t K, const float *a, const float *b,
                                      const ptrdiff_t *koff, const ptrdiff_t *voff, int nlanes,
                                      int mrows, float *c, ptrdiff_t c_rs, const float *res,
                                      const mk_seg *segs, int nseg, int act) {
    igemm_8xNV(1, K, a, b, koff, voff, nlanes, mrows, c, c_rs, res, segs, nseg, act);
}

#endif /* MK_X86 */

/* bfloat16-compute GEMM microkernel, 8x32 register block (16 float32 accumulators),
 * AVX512-BF16: each vdpbf16ps multiplies one broadcast pair of an activation row (two k) by
 * a pair row of the weight panel (32 columns x 2 k) and adds both products to float32
 * accumulators. A: the pair micro-panels of mk_bf16_pack_a_pairs__avx512bf16 (word kp * 8 + i);
 * W: the VNNI-pair panel of mk_bf16_pack_w_pairs; C, bias and the epilogue float32 (the
 * mk_gemm_ukernel contract of gemm.h). Chosen in gemm-config.c. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */
#include <immintrin.h>

#include "gemm.h"

#define MR 8

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"))) void
mk_bf16_gemm_8x32__avx512bf16(size_t mr, size_t nc, size_t kc, const void *a_, const void *w_,
                              void *c_, size_t ldc, const void *init_, const mk_epilogue *ep) {
    const uint32_t *restrict a = (const uint32_t *)a_; /* in: packed pairs */
    const uint16_t *restrict w = (const uint16_t *)w_; /* in: pair rows of 32 x 2 */
    float *restrict c = (float *)c_;                   /* in/out: mr x nc */
    const __mmask16 m0 = nc >= 16 ? 0xFFFF : (__mmask16)((1u << nc) - 1u);
    const __mmask16 m1 = nc >= 32 ? 0xFFFF : (nc <= 16 ? 0 : (__mmask16)((1u << (nc - 16)) - 1u));
    __m512 acc[MR][2];
    if (init_ != NULL) {
        const __m512 b0 = _mm512_loadu_ps((const float *)init_);
        const __m512 b1 = _mm512_loadu_ps((const float *)init_ + 16);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            acc[i][0] = b0;
            acc[i][1] = b1;
        }
    } else {
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            /* rows past mr re-read row mr - 1: valid memory, result never stored */
            const float *row = c + (size_t)(i < (int)mr ? i : (int)mr - 1) * ldc;
            acc[i][0] = _mm512_maskz_loadu_ps(m0, row);
            acc[i][1] = _mm512_maskz_loadu_ps(m1, row + 16);
        }
    }
    const size_t kp = (kc + 1) / 2; /* pair rows (the packed tails are zero) */
    for (size_t p = 0; p < kp; p++) {
        const __m512bh w0 = (__m512bh)_mm512_loadu_si512(w);
        const __m512bh w1 = (__m512bh)_mm512_loadu_si512(w + 32);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            const __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[i]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, w0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, w1);
        }
        a += MR;
        w += 64;
    }
    if (ep != NULL && (ep->act == MK_ACT_RELU || ep->act == MK_ACT_CLAMP)) {
        const __m512 lo = _mm512_set1_ps(ep->lo32), hi = _mm512_set1_ps(ep->hi32);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            acc[i][0] = _mm512_min_ps(hi, _mm512_max_ps(lo, acc[i][0]));
            acc[i][1] = _mm512_min_ps(hi, _mm512_max_ps(lo, acc[i][1]));
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        if (i < (int)mr) {
            float *row = c + (size_t)i * ldc;
            _mm512_mask_storeu_ps(row, m0, acc[i][0]);
            _mm512_mask_storeu_ps(row + 16, m1, acc[i][1]);
        }
    }
    if (ep != NULL && ep->act >= MK_ACT_GELU_ERF) mk_act_tile_f32_avx512(mr, nc, c, ldc, ep);
}

#endif /* MK_X86 */

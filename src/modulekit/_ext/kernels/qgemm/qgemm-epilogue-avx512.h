/* The AVX-512 epilogue of the int8 GEMM tiles (VNNI and AMX): one row of a panel's int32 sums
 * to float32 or to bytes, as qgemm.h's mk_qgemm_epilogue says, with the portable kernel's
 * arithmetic in the same order (so every path stores the same bits), and the requantization
 * of 16 values the NCHW input conversion shares. Include after <immintrin.h> in a file whose
 * functions target at least MK_QEPI_TARGET. */
#ifndef MK_QGEMM_EPILOGUE_AVX512_H
#define MK_QGEMM_EPILOGUE_AVX512_H

#include <math.h>

#include "qgemm.h"

#include "common/vmath-avx512.h"

/* the activation math's target (common/vops-avx512.h): the kernels including this header
 * carry it (or a superset) */
#define MK_QEPI_TARGET MK_TARGET_AVX512

/* The panel's per-column constants, loaded once per tile: with one activation scale for
 * every row (ascale_step 0, the static convolutions) ws holds its products with it already
 * (the same products the rows would form: the same bits). */
typedef struct {
    __m512i corr0, corr1;
    __m512 ws0, ws1, b0, b1, lo, hi;
    __mmask16 m0, m1;
    int scaled; /* ws0/ws1 are ascale[0] * ws */
    int has_hi; /* hi is finite (ReLU6 or a clamp; ReLU and none have no upper bound) */
} mk_qepi_panel;

MK_QEPI_TARGET static inline __attribute__((always_inline)) mk_qepi_panel
mk_qepi_load(const void *panel, size_t nr, size_t nc, const float *ascale,
             const mk_qgemm_epilogue *ep) {
    const int32_t *corr = (const int32_t *)panel;
    const float *ws = (const float *)(corr + nr), *bias = ws + nr;
    mk_qepi_panel p;
    p.corr0 = _mm512_load_si512((const void *)corr);
    p.corr1 = _mm512_load_si512((const void *)(corr + 16));
    p.ws0 = _mm512_load_ps(ws);
    p.ws1 = _mm512_load_ps(ws + 16);
    p.scaled = ep->ascale_step == 0;
    if (p.scaled) {
        const __m512 sx = _mm512_set1_ps(ascale[0]);
        p.ws0 = _mm512_mul_ps(sx, p.ws0);
        p.ws1 = _mm512_mul_ps(sx, p.ws1);
    }
    p.b0 = _mm512_load_ps(bias);
    p.b1 = _mm512_load_ps(bias + 16);
    p.lo = _mm512_set1_ps(ep->lo);
    p.hi = _mm512_set1_ps(ep->hi);
    p.has_hi = ep->hi < INFINITY;
    p.m0 = nc >= 16 ? 0xffff : (__mmask16)((1u << nc) - 1);
    p.m1 = nc >= 32 ? 0xffff : nc <= 16 ? 0 : (__mmask16)((1u << (nc - 16)) - 1);
    return p;
}

/* mk_qu8_requantize (qgemm.h) of 16 values, as 16 bytes, with fewer steps: its lower clamp
 * to -512 (NaN included) only ever leads to byte 0, which cvtps2dq's INT_MIN for NaN (and
 * anything below -2^31) reaches too once zp (0..255) is added and negatives go to 0; the
 * upper clamp stays (a value past 2^31 would also convert to INT_MIN), and vpmovusdb
 * saturates at 255. The same bytes. */
MK_QEPI_TARGET static inline __attribute__((always_inline)) __m128i
mk_qu8_requantize16(__m512 y, float inv, int32_t zp) {
    const __m512 t = _mm512_min_ps(_mm512_set1_ps(512.0f), /* NaN: the second operand */
                                   _mm512_mul_ps(y, _mm512_set1_ps(inv)));
    const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(t), _mm512_set1_epi32(zp));
    return _mm512_cvtusepi32_epi8(_mm512_max_epi32(q, _mm512_setzero_si512()));
}

/* 16 results: residual, clamp, then stored as floats or requantized bytes */
MK_QEPI_TARGET static inline __attribute__((always_inline)) void
mk_qepi_store16(__m512 y, __mmask16 m, const mk_qepi_panel *p, const uint8_t *res, void *c,
                const mk_qgemm_epilogue *ep) {
    if (res != NULL) {
        const __m512i r = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, res));
        y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(r, _mm512_set1_epi32(ep->res_zp))),
                            _mm512_set1_ps(ep->res_scale), y);
    }
    y = _mm512_max_ps(p->lo, y);                   /* NaN stays NaN (the second operand) */
    if (p->has_hi) y = _mm512_min_ps(p->hi, y);    /* min(+inf, y) would be y: skipped */
    if (!ep->out_u8) {
        if (ep->act > MK_ACT_CLAMP) y = mk_act_f32x16(y, ep->act, 0.0f, 0.0f);
        if (m == 0xffff)
            _mm512_storeu_ps(c, y);
        else
            _mm512_mask_storeu_ps(c, m, y);
        return;
    }
    const __m128i q = mk_qu8_requantize16(y, ep->out_inv_scale, ep->out_zp);
    if (m == 0xffff) /* a whole block: the narrowing in a register, one plain store */
        _mm_storeu_si128((__m128i *)c, q);
    else
        _mm_mask_storeu_epi8(c, m, q);
}

/* One row: s0, s1 the int32 sums of columns 0-15 and 16-31; sx the row's activation scale;
 * res and c that row's residual (or NULL) and output. */
MK_QEPI_TARGET static inline __attribute__((always_inline)) void
mk_qepi_row(__m512i s0, __m512i s1, float sx, const mk_qepi_panel *p, const uint8_t *res,
            void *c, const mk_qgemm_epilogue *ep) {
    const __m512 vsx = _mm512_set1_ps(sx);
    const __m512 sw0 = p->scaled ? p->ws0 : _mm512_mul_ps(vsx, p->ws0);
    const __m512 sw1 = p->scaled ? p->ws1 : _mm512_mul_ps(vsx, p->ws1);
    const __m512 y0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s0, p->corr0)), sw0,
                                      p->b0);
    const __m512 y1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s1, p->corr1)), sw1,
                                      p->b1);
    const size_t width = ep->out_u8 ? 1 : sizeof(float);
    mk_qepi_store16(y0, p->m0, p, res, c, ep);
    if (p->m1)
        mk_qepi_store16(y1, p->m1, p, res != NULL ? res + 16 : NULL, (char *)c + 16 * width, ep);
}

#endif /* MK_QGEMM_EPILOGUE_AVX512_H */

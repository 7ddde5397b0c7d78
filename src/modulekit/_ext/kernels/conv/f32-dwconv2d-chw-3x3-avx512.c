/* Depthwise 3x3 convolution of one CHW plane, float32, AVX-512 (16 output columns per vector),
 * stride 1 or 2, dilation 1, any padding, read straight from the input (no padded copy):
 * padding is a zero-masked load (masked-out lanes are never touched) or a skipped row.
 *
 * One output row per step, 16 columns at a time, each output the sum of three short 3-FMA
 * chains (one per kernel row); the chains of the next rows that read the same input row are
 * carried in registers: stride 1 (dw3_s1_rows) loads each input row once per column step for
 * 9 FMAs, stride 2 (dw3_s2_rows) two rows for 9 FMAs. A small loop body with no spills: 1.05x
 * (112-column rows) to 1.8x (14-column rows) the 4-row blocks it replaced, whose 12 chains and
 * unrolled rows ran at 20-45% of the FMA peak. Stride 2 loads two vectors (32 input columns)
 * and one extra column per input row and splits them into the even/odd/even+2 column vectors
 * with two permutes and one align: no phase copy. Rows of at most 16 columns with one column of
 * padding each side (the 14x14 and 7x7 maps) load once and take their left/right neighbours by
 * lane shifts (1.4x faster there); wider rows with a left padding of 1 load the vectors 16
 * columns apart, all with the row's alignment (no extra cache line crossings), and shift in
 * lanes too (5-10%). The S argument selects the variant: 0 narrow, 3 wide, 1 generic stride 1,
 * 2 stride 2. Bias, the residual add and the activation are applied while the accumulators are
 * in registers. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include "conv-simd.h"

/* Load masks of the input columns an output-column step reads (lanes outside [0, W) off):
 * stride 1: the three shifted vectors; stride 2: the two halves of the 32 columns and the
 * extra column. */
MK_T512 static inline void dw3_masks(const int S, int W, int ow, int pl, __mmask16 m[3]) {
    if (S == 3) { /* the vectors at ow - 16, ow, ow + 16 */
        for (int j = 0; j < 3; j++) {
            const int b = ow - 16 + 16 * j;
            m[j] = (__mmask16)mk_seg_mask(-b, W - b, 0, 16);
        }
    } else if (S <= 1) {
        for (int kw = 0; kw < 3; kw++) {
            const int b = ow - pl + kw; /* input column of lane 0 */
            m[kw] = (__mmask16)mk_seg_mask(-b, W - b, 0, 16);
        }
    } else {
        const int b = 2 * ow - pl;
        m[0] = (__mmask16)mk_seg_mask(-b, W - b, 0, 16);
        m[1] = (__mmask16)mk_seg_mask(-b, W - b, 1, 16);
        m[2] = (__mmask16)(mk_seg_mask(-b, W - b, 2, 16) & 1u);
    }
}

/* Shifted column vectors of input row xr for output columns [ow, ow+16): v[kw] lane i =
 * padded input column (ow + i) * S + kw (columns outside [0, W) read as 0). */
MK_T512 static inline void dw3_row_cols(const int S, const float *xr, int ow, int pl,
                                        const __mmask16 m[3], __m512 v[3]) {
    if (S == 0) {
        /* narrow rows (W <= 16, ow = 0, one column of padding each side): one load, the
         * neighbours by lane shifts (lanes >= W load as 0, so the right shift brings in the
         * padding) instead of two more unaligned loads */
        const __m512i z = _mm512_setzero_si512();
        const __m512i c = _mm512_castps_si512(_mm512_maskz_loadu_ps(m[1], xr));
        v[0] = _mm512_castsi512_ps(_mm512_alignr_epi32(c, z, 15));
        v[1] = _mm512_castsi512_ps(c);
        v[2] = _mm512_castsi512_ps(_mm512_alignr_epi32(z, c, 1));
    } else if (S == 3) {
        /* wide rows, one column of padding on the left: three loads 16 columns apart (the same
         * alignment: when the row is aligned no load crosses a cache line), the neighbours by
         * lane shifts */
        const __m512i a = _mm512_castps_si512(_mm512_maskz_loadu_ps(m[0], xr + ow - 16));
        const __m512i c = _mm512_castps_si512(_mm512_maskz_loadu_ps(m[1], xr + ow));
        const __m512i n = _mm512_castps_si512(_mm512_maskz_loadu_ps(m[2], xr + ow + 16));
        v[0] = _mm512_castsi512_ps(_mm512_alignr_epi32(c, a, 15));
        v[1] = _mm512_castsi512_ps(c);
        v[2] = _mm512_castsi512_ps(_mm512_alignr_epi32(n, c, 1));
    } else if (S == 1) {
        const float *p = xr + ow - pl;
        v[0] = _mm512_maskz_loadu_ps(m[0], p);
        v[1] = _mm512_maskz_loadu_ps(m[1], p + 1);
        v[2] = _mm512_maskz_loadu_ps(m[2], p + 2);
    } else {
        const float *p = xr + 2 * ow - pl;
        const __m512 A = _mm512_maskz_loadu_ps(m[0], p);
        const __m512 B = _mm512_maskz_loadu_ps(m[1], p + 16);
        const __m512 C = _mm512_maskz_loadu_ps(m[2], p + 32);
        const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24,
                                             26, 28, 30);
        const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25,
                                             27, 29, 31);
        v[0] = _mm512_permutex2var_ps(A, ie, B);
        v[1] = _mm512_permutex2var_ps(A, io, B);
        v[2] = _mm512_castsi512_ps(
            _mm512_alignr_epi32(_mm512_castps_si512(C), _mm512_castps_si512(v[0]), 1));
    }
}

/* a + w[0]*v[0] + w[1]*v[1] + w[2]*v[2], in that order */
MK_T512 static inline __m512 dw3_chain(__m512 a, const __m512 *w, const __m512 v[3]) {
    a = _mm512_fmadd_ps(w[0], v[0], a);
    a = _mm512_fmadd_ps(w[1], v[1], a);
    return _mm512_fmadd_ps(w[2], v[2], a);
}

/* One output row's 16 columns (mask sm): + residual row rr (or NULL), activation, store. */
MK_T512 static inline void dw3_store(float *o, __mmask16 sm, __m512 a, const float *rr,
                                     int act) {
    if (rr) a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(sm, rr));
    _mm512_mask_storeu_ps(o, sm, mk_act_f32x16(a, act, 0.0f, 0.0f));
}

/* Stride 1 (S = 0, 1, 3), output rows [oh0, oh1) of one plane, 16 columns at a time, one
 * output row per step: each step loads one input row (3 vectors) for 9 FMAs, finishing
 * output row oh (kernel row 2), adding kernel row 1 of row oh + 1 and starting row oh + 2
 * (bias and kernel row 0); the partial sums of the next two rows are carried in registers. Each output is the same three 3-FMA chains
 * (bias and kernel row 0, rows 1 and 2 from 0, added in that order; a padding row is skipped)
 * as the 4-row blocks this replaced, so the results are equal bit for bit. */
MK_T512 static inline void dw3_s1_rows(const int S, const float *x, ptrdiff_t sh, int H, int W,
                                       int pt, int pl, int OW, int oh0, int oh1,
                                       const __m512 wv[9], float bias, float *out,
                                       ptrdiff_t ors, const float *res, ptrdiff_t rrs,
                                       int act) {
    const __m512 b0 = _mm512_set1_ps(bias), z = _mm512_setzero_ps();
    for (int ow = 0; ow < OW; ow += 16) {
        __mmask16 lm[3];
        dw3_masks(S, W, ow, pl, lm);
        const __mmask16 sm = (__mmask16)mk_seg_mask(0, OW - ow, 0, 16);
        /* c0, c1: kernel rows 0 and 1 of output row oh; d0: kernel row 0 of row oh + 1 */
        __m512 v[3], c0 = b0, c1 = z, d0 = b0;
        int y = oh0 - pt;
        if (y >= 0 && y < H) {
            dw3_row_cols(S, x + y * sh, ow, pl, lm, v);
            c0 = dw3_chain(b0, wv, v);
        }
        y++;
        if (y >= 0 && y < H) {
            dw3_row_cols(S, x + y * sh, ow, pl, lm, v);
            c1 = dw3_chain(z, wv + 3, v);
            d0 = dw3_chain(b0, wv, v);
        }
        float *o = out + ow;
        const float *rr = res ? res + ow : NULL;
        for (int oh = oh0; oh < oh1; oh++, o += ors) {
            y = oh - pt + 2;
            __m512 c2 = z, d1 = z, e0 = b0;
            if (y >= 0 && y < H) {
                dw3_row_cols(S, x + y * sh, ow, pl, lm, v);
                c2 = dw3_chain(z, wv + 6, v);
                d1 = dw3_chain(z, wv + 3, v);
                e0 = dw3_chain(b0, wv, v);
            }
            dw3_store(o, sm, _mm512_add_ps(_mm512_add_ps(c0, c1), c2), rr, act);
            if (rr) rr += rrs;
            c0 = d0;
            c1 = d1;
            d0 = e0;
        }
    }
}

/* Stride 2, output rows [oh0, oh1) of one plane, 16 columns at a time, one output row per step:
 * kernel row 0 of output row oh + 1 reads the same input row as kernel row 2 of row oh, so a
 * step loads two input rows (6 vectors) for 9 FMAs and carries the next row's first partial
 * sum. The chains and their order are dw3_s1_rows', so the results equal the 4-row blocks
 * this replaced bit for bit; 1.3-1.8x faster than those at stride 2 (they ran at 20-25% of
 * the FMA peak). */
MK_T512 static inline void dw3_s2_rows(const float *x, ptrdiff_t sh, int H, int W,
                                       int pt, int pl, int OW, int oh0, int oh1,
                                       const __m512 wv[9], float bias, float *out,
                                       ptrdiff_t ors, const float *res, ptrdiff_t rrs,
                                       int act) {
    const __m512 b0 = _mm512_set1_ps(bias), z = _mm512_setzero_ps();
    for (int ow = 0; ow < OW; ow += 16) {
        __mmask16 lm[3];
        dw3_masks(2, W, ow, pl, lm);
        const __mmask16 sm = (__mmask16)mk_seg_mask(0, OW - ow, 0, 16);
        __m512 v[3], carry = b0; /* kernel row 0 of output row oh (bias first) */
        const int iy = 2 * oh0 - pt;
        if (iy >= 0 && iy < H) {
            dw3_row_cols(2, x + iy * sh, ow, pl, lm, v);
            carry = dw3_chain(b0, wv, v);
        }
        float *o = out + ow;
        const float *rr = res ? res + ow : NULL;
        for (int oh = oh0; oh < oh1; oh++, o += ors) {
            const int y1 = 2 * oh - pt + 1, y2 = y1 + 1;
            __m512 a1 = z, a2 = z, next = b0;
            if (y1 >= 0 && y1 < H) {
                dw3_row_cols(2, x + y1 * sh, ow, pl, lm, v);
                a1 = dw3_chain(z, wv + 3, v);
            }
            if (y2 >= 0 && y2 < H) {
                dw3_row_cols(2, x + y2 * sh, ow, pl, lm, v);
                a2 = dw3_chain(z, wv + 6, v);
                next = dw3_chain(b0, wv, v);
            }
            dw3_store(o, sm, _mm512_add_ps(_mm512_add_ps(carry, a1), a2), rr, act);
            if (rr) rr += rrs;
            carry = next;
        }
    }
}

/* One plane, output rows [oh0, oh1).
 *   x    : input plane, row y at x + y*sh, columns contiguous; rows [0, H) valid (only the rows
 *          the requested output rows need are read)                         input
 *   w    : 9 taps (row-major 3x3); bias: added first
 *   out  : output row oh0 (row oh at out + (oh - oh0)*ors)                  output
 *   res  : residual with the same addressing (row stride rrs), or NULL      input */
MK_T512 void mk_f32_dwconv2d_chw_3x3_avx512(const float *x, ptrdiff_t sh, int H, int W,
                                           int stride, int pt, int pl, int OW, int oh0,
                                           int oh1, const float *w, float bias, float *out,
                                           ptrdiff_t ors, const float *res, ptrdiff_t rrs,
                                           int act) {
    __m512 wv[9];
    for (int t = 0; t < 9; t++) wv[t] = _mm512_set1_ps(w[t]);
    if (stride == 1 && pl == 1 && OW == W && W <= 16) /* narrow rows: S = 0 variant */
        dw3_s1_rows(0, x, sh, H, W, pt, pl, OW, oh0, oh1, wv, bias, out, ors, res, rrs, act);
    else if (stride == 1 && pl == 1) /* wide rows: S = 3 variant */
        dw3_s1_rows(3, x, sh, H, W, pt, pl, OW, oh0, oh1, wv, bias, out, ors, res, rrs, act);
    else if (stride == 1)
        dw3_s1_rows(1, x, sh, H, W, pt, pl, OW, oh0, oh1, wv, bias, out, ors, res, rrs, act);
    else
        dw3_s2_rows(x, sh, H, W, pt, pl, OW, oh0, oh1, wv, bias, out, ors, res, rrs, act);
}

/* Whole small planes (H*W <= 256), stride 1, one column and row of padding each side (OH = H,
 * OW = W), channels [0, C): each plane is taken as one flat run of H*W pixels, 16 pixels a
 * vector whatever the row width, and every tap is one zero-masked load at the flat offset
 * (ky - 1)*W + (kx - 1), its mask dropping the lanes whose source is padding (first or last
 * row or column) or past the plane: a 7x7 plane is 4 vectors (49 of 64 lanes used) instead of
 * 7 rows of 7 lanes (16 lanes each). Measured (MobileNetV2's blocks, one thread): 2-3% faster
 * on the 7x7 blocks, 4% slower on the 14x14 ones (13 vectors of 9 unaligned loads against 14
 * rows loaded once and shifted in lanes), so the fused block runs it for rows of at most 8
 * columns. The sums are the row kernel's, in its order (bias and kernel row 0,
 * kernel rows 1 and 2 each from 0, then added in that order; a padding tap adds 0), so the
 * result is the same bit for bit.
 *   x   : plane c at x + c*xs, row y at + y*W (rows contiguous)                  input
 *   w   : C x 9 taps; bias: C
 *   out : plane c at out + c*os, row y at + y*W                                  output */
MK_T512 void mk_f32_dwconv2d_flat_3x3_avx512(const float *x, ptrdiff_t xs, int H, int W,
                                            int C, const float *w, const float *bias,
                                            float *out, ptrdiff_t os, int act) {
    const int L = H * W, nv = (L + 15) / 16;
    __mmask16 in[16], top[16], bot[16], left[16], right[16];
    for (int v = 0; v < nv; v++) {
        unsigned a = 0, t = 0, b = 0, l = 0, r = 0;
        for (int i = 0; i < 16; i++) {
            const int p = 16 * v + i, col = p % W;
            if (p >= L) break;
            a |= 1u << i;
            t |= (unsigned)(p >= W) << i;     /* a row above */
            b |= (unsigned)(p < L - W) << i;  /* a row below */
            l |= (unsigned)(col > 0) << i;    /* a column to the left */
            r |= (unsigned)(col < W - 1) << i; /* a column to the right */
        }
        in[v] = (__mmask16)a;
        top[v] = (__mmask16)(a & t);
        bot[v] = (__mmask16)(a & b);
        left[v] = (__mmask16)l;
        right[v] = (__mmask16)r;
    }
    for (int c = 0; c < C; c++) {
        const float *xc = x + c * xs, *wc = w + 9 * c;
        float *oc = out + c * os;
        __m512 wv[9];
#pragma GCC unroll 9
        for (int t = 0; t < 9; t++) wv[t] = _mm512_set1_ps(wc[t]);
        const __m512 b0 = _mm512_set1_ps(bias[c]);
        for (int v = 0; v < nv; v++) {
            const float *p = xc + 16 * v;
            const __mmask16 rows[3] = {top[v], in[v], bot[v]};
            __m512 acc[3];
#pragma GCC unroll 3
            for (int ky = 0; ky < 3; ky++) {
                const float *q = p + (ky - 1) * W;
                __m512 s = ky == 0 ? b0 : _mm512_setzero_ps();
                s = _mm512_fmadd_ps(wv[3 * ky + 0],
                                    _mm512_maskz_loadu_ps(rows[ky] & left[v], q - 1), s);
                s = _mm512_fmadd_ps(wv[3 * ky + 1], _mm512_maskz_loadu_ps(rows[ky], q), s);
                acc[ky] = _mm512_fmadd_ps(wv[3 * ky + 2],
                                          _mm512_maskz_loadu_ps(rows[ky] & right[v], q + 1), s);
            }
            const __m512 s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), acc[2]);
            _mm512_mask_storeu_ps(oc + 16 * v, in[v], mk_act_f32x16(s, act, 0.0f, 0.0f));
        }
    }
}

#endif /* MK_X86 */

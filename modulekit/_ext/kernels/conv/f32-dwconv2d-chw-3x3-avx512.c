/* Depthwise 3x3 convolution of one CHW plane, float32, AVX-512 (16 output columns per vector),
 * stride 1 or 2, dilation 1, any padding, read straight from the input (no padded copy):
 * padding is a zero-masked load (masked-out lanes are never touched) or a skipped row.
 *
 * Stride 1 computes the output rows 4 at a time: each input row of the band is loaded once per
 * 16-column step and feeds every output row it is a vertical neighbour of, so it loads 6 rows x
 * 3 shifted vectors for 36 FMAs, kept as 12 short dependency chains. Stride 2 runs one output
 * row per step (dw3_s2_rows), carrying the next row's first partial sum; it loads two vectors
 * (32 input columns) and one extra column per input row and splits them into the
 * even/odd/even+2 column vectors with two permutes and one align: no phase copy. Rows of at
 * most 16 columns with one column of padding each side (the 14x14 and 7x7 maps) load once and
 * take their left/right neighbours by lane shifts (1.4x faster there); wider rows with a left
 * padding of 1 load the vectors 16 columns apart, all with the row's alignment (no extra cache
 * line crossings), and shift in lanes too (5-10%). The S argument selects the variant: 0
 * narrow, 3 wide, 1 generic stride 1 (dw3_band), 2 stride 2 (dw3_s2_rows). Bias, the residual
 * add and the activation are applied while the accumulators are in registers. */
#include "simd-act.h"

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

/* Stride 1 (S = 0, 1, 3): output rows [oh, oh + nrows) (nrows <= ROWS), every column, of one
 * plane. */
MK_T512 static inline void dw3_band(const int S, const int ROWS, const float *x, ptrdiff_t sh,
                                    int H, int W, int pt, int pl, int OW, int oh, int nrows,
                                    const __m512 wv[9], float bias, float *out, ptrdiff_t ors,
                                    const float *res, ptrdiff_t rrs, int act) {
    const int NIN = ROWS + 2; /* input rows of a full band (stride 1) */
    for (int ow = 0; ow < OW; ow += 16) {
        /* one partial sum per (output row, kernel row): 3-FMA dependency chains, 12 of them
         * in flight, instead of 9-FMA chains that would leave the FMA units waiting */
        __m512 acc[4][3];
        __mmask16 lm[3];
        dw3_masks(S, W, ow, pl, lm);
#pragma GCC unroll 4
        for (int j = 0; j < ROWS; j++) {
            acc[j][0] = _mm512_set1_ps(bias);
            acc[j][1] = _mm512_setzero_ps();
            acc[j][2] = _mm512_setzero_ps();
        }
#pragma GCC unroll 9
        for (int r = 0; r < NIN; r++) {
            const int iy = oh - pt + r;
            if (iy < 0 || iy >= H) continue; /* padding row: contributes 0 */
            if (r >= nrows + 2) break;
            __m512 v[3];
            dw3_row_cols(S, x + iy * sh, ow, pl, lm, v);
#pragma GCC unroll 4
            for (int j = 0; j < ROWS; j++) {
                const int kh = r - j; /* tap row kh of output row oh + j */
                if (kh < 0 || kh > 2) continue;
                __m512 a = acc[j][kh];
                a = _mm512_fmadd_ps(wv[3 * kh + 0], v[0], a);
                a = _mm512_fmadd_ps(wv[3 * kh + 1], v[1], a);
                acc[j][kh] = _mm512_fmadd_ps(wv[3 * kh + 2], v[2], a);
            }
        }
        const __mmask16 m = (__mmask16)mk_seg_mask(0, OW - ow, 0, 16);
#pragma GCC unroll 4
        for (int j = 0; j < ROWS; j++) {
            if (j >= nrows) break;
            __m512 a = _mm512_add_ps(_mm512_add_ps(acc[j][0], acc[j][1]), acc[j][2]);
            if (res) a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(m, res + j * rrs + ow));
            _mm512_mask_storeu_ps(out + j * ors + ow, m, mk_act512(a, act));
        }
    }
}

/* Stride 2, output rows [oh0, oh1) of one plane, 16 columns at a time, one output row per step:
 * kernel row 0 of output row oh + 1 reads the same input row as kernel row 2 of row oh, so a
 * step loads two input rows (6 vectors) for 9 FMAs and carries the next row's first partial
 * sum. Each output is the
 * same three 3-FMA chains added as in dw3_band (bias and kernel row 0, rows 1 and 2 from 0;
 * a padding row is skipped), so the results are equal bit for bit. One small loop body with
 * no spills: 1.3-1.8x faster than dw3_band's 4-row blocks at stride 2 (whose 12 chains and
 * 9 unrolled rows left it at about 20-25% of the FMA peak). */
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
            __m512 a = _mm512_add_ps(_mm512_add_ps(carry, a1), a2);
            if (rr) {
                a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(sm, rr));
                rr += rrs;
            }
            _mm512_mask_storeu_ps(o, sm, mk_act512(a, act));
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
    if (stride == 1 && pl == 1 && OW == W && W <= 16) { /* narrow rows: S = 0 variant */
        for (int oh = oh0; oh < oh1; oh += 4) {
            const int nr = oh1 - oh < 4 ? oh1 - oh : 4;
            const ptrdiff_t d = oh - oh0;
            dw3_band(0, 4, x, sh, H, W, pt, pl, OW, oh, nr, wv, bias, out + d * ors, ors,
                     res ? res + d * rrs : NULL, rrs, act);
        }
    } else if (stride == 1 && pl == 1) { /* wide rows: S = 3 variant */
        for (int oh = oh0; oh < oh1; oh += 4) {
            const int nr = oh1 - oh < 4 ? oh1 - oh : 4;
            const ptrdiff_t d = oh - oh0;
            dw3_band(3, 4, x, sh, H, W, pt, pl, OW, oh, nr, wv, bias, out + d * ors, ors,
                     res ? res + d * rrs : NULL, rrs, act);
        }
    } else if (stride == 1) {
        for (int oh = oh0; oh < oh1; oh += 4) {
            const int nr = oh1 - oh < 4 ? oh1 - oh : 4;
            const ptrdiff_t d = oh - oh0;
            dw3_band(1, 4, x, sh, H, W, pt, pl, OW, oh, nr, wv, bias, out + d * ors, ors,
                     res ? res + d * rrs : NULL, rrs, act);
        }
    } else {
        dw3_s2_rows(x, sh, H, W, pt, pl, OW, oh0, oh1, wv, bias, out, ors, res, rrs, act);
    }
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
            _mm512_mask_storeu_ps(oc + 16 * v, in[v], mk_act512(s, act));
        }
    }
}

/* float32 max pooling, AVX-512: the three passes of pool.c's DEFINE_MAX_POOL (the max over the
 * window's rows into a -inf padded row buffer, then over the window's columns at each output
 * column) with 16 lanes per step, for unit input column stride and column stride 1 or 2
 * (stride 2: each tap's 16 outputs are the even lanes of two loads, one permute; 3/2 windows
 * take all three taps from the even and odd lanes of two loads, see pool_rows). The max is
 * the scalar rule exactly, (v > m || v != v) ? v : m, as two compares and a masked move, so
 * the result is bit-identical to the portable path (NaNs and signed zeros included).
 * ResNet's 3x3 stride-2 pool over 64 x 112 x 112 (2 threads) went from 2.4x onnxruntime's time
 * (194 vs 82 us) to 0.7x (68 vs 95 us). */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <math.h>
#include <stdlib.h>

#include "conv.h"
#include "common/team.h"
#include "mk_omp.h"
#include "conv-simd.h"

MK_T512 static inline __m512 maxnan16(__m512 v, __m512 m) {
    const __mmask16 k = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(m, k, v);
}

static inline __mmask16 head16(ptrdiff_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n > 0 ? n : 0)) - 1);
}

/* Output rows per chunk: the row passes of a chunk's rows run before their column passes, so a
 * column pass never loads a row buffer whose stores are still in flight (the loads straddle
 * two stores at the -inf padding offset, which store forwarding cannot serve: the row buffer
 * written and read back at once cost ResNet's fused stem pool about a third of its time). */
#define POOL_CHUNK 4

/* Floats of one row buffer: -inf padding, the row, and room for the last 16-output step's
 * reads ((OW rounded up to 16) * sx + reach + 16 floats; the 3/2 walk reads 32 floats past
 * the last step's start), rounded to whole cache lines. */
static int pool_row_floats(const mk_conv_geom *g) {
    const int OW16 = (g->OW + 15) / 16 * 16;
    int nb = OW16 * g->sx + (g->KW - 1) * g->dx + 32;
    if (nb < g->pl + g->W + 16) nb = g->pl + g->W + 16;
    return (nb + 15) / 16 * 16;
}

/* Output rows [oh0, oh1) of one plane; input row h is read at xp + (h - ybase) * sh (the fused
 * convolution + pooling of f32-conv-driver.c holds a band of rows from ybase on). buf:
 * POOL_CHUNK row buffers of pool_row_floats floats, -inf outside the rows written. */
MK_T512 static void pool_rows(const mk_conv_geom *g, const float *xp, int ybase, float *o,
                              float *buf, int oh0, int oh1) {
    const int W = g->W, sx = g->sx, OW = g->OW;
    const int nb = pool_row_floats(g);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int c0 = oh0; c0 < oh1; c0 += POOL_CHUNK) {
        const int c1 = c0 + POOL_CHUNK < oh1 ? c0 + POOL_CHUNK : oh1;
        /* (1) rows: row[w] = max over the window's rows (W columns, unit stride) */
        for (int oh = c0; oh < c1; oh++) {
            float *row = buf + (ptrdiff_t)(oh - c0) * nb + g->pl;
            int h0 = oh * g->sy - g->pt;
            const int h1 =
                h0 + (g->KH - 1) * g->dy + 1 < g->H ? h0 + (g->KH - 1) * g->dy + 1 : g->H;
            while (h0 < 0) h0 += g->dy;
            if (h0 >= h1) { /* every row of the window is padding (dilation): -inf, no read */
                for (int w = 0; w < W; w++) row[w] = -INFINITY;
                continue;
            }
            const float *r0 = xp + (ptrdiff_t)(h0 - ybase) * g->sh;
            int w = 0;
            for (; w + 16 <= W; w += 16) {
                __m512 acc = _mm512_loadu_ps(r0 + w);
                for (int h = h0 + g->dy; h < h1; h += g->dy)
                    acc = maxnan16(_mm512_loadu_ps(xp + (ptrdiff_t)(h - ybase) * g->sh + w),
                                   acc);
                _mm512_storeu_ps(row + w, acc);
            }
            if (w < W) {
                const __mmask16 m = head16(W - w);
                __m512 acc = _mm512_maskz_loadu_ps(m, r0 + w);
                for (int h = h0 + g->dy; h < h1; h += g->dy)
                    acc = maxnan16(
                        _mm512_maskz_loadu_ps(m, xp + (ptrdiff_t)(h - ybase) * g->sh + w), acc);
                _mm512_mask_storeu_ps(row + w, m, acc);
            }
        }
        /* (2)+(3) columns: out[ow] = max_j buf[ow*sx + j*dx], 16 outputs per step */
        for (int oh = c0; oh < c1; oh++) {
            const float *rb = buf + (ptrdiff_t)(oh - c0) * nb;
            float *orow = o + (ptrdiff_t)oh * OW;
            if (sx == 2 && g->KW == 3 && g->dx == 1) {
                /* 3/2 windows: taps 0 and 1 are the even and odd columns E, O of the step's
                 * 32 buffer columns, tap 2 is E shifted one lane with the next step's E: two
                 * loads and three shuffles per step instead of six loads and three permutes */
                __m512 v0 = _mm512_loadu_ps(rb), v1 = _mm512_loadu_ps(rb + 16);
                __m512 e = _mm512_permutex2var_ps(v0, even, v1);
                __m512 od = _mm512_permutex2var_ps(v0, odd, v1);
                for (int ow = 0; ow < OW; ow += 16) {
                    const float *bn = rb + (ptrdiff_t)2 * ow + 32;
                    v0 = _mm512_loadu_ps(bn);
                    v1 = _mm512_loadu_ps(bn + 16);
                    const __m512 en = _mm512_permutex2var_ps(v0, even, v1);
                    const __m512 t2 = _mm512_castsi512_ps(_mm512_alignr_epi32(
                        _mm512_castps_si512(en), _mm512_castps_si512(e), 1));
                    const __m512 acc = maxnan16(t2, maxnan16(od, e));
                    _mm512_mask_storeu_ps(orow + ow, head16(OW - ow), acc);
                    e = en;
                    od = _mm512_permutex2var_ps(v0, odd, v1);
                }
                continue;
            }
            for (int ow = 0; ow < OW; ow += 16) {
                const float *b0 = rb + (ptrdiff_t)ow * sx;
                __m512 acc = _mm512_set1_ps(-INFINITY);
                for (int j = 0; j < g->KW; j++) {
                    const float *bj = b0 + j * g->dx;
                    const __m512 v = sx == 1 ? _mm512_loadu_ps(bj)
                                             : _mm512_permutex2var_ps(_mm512_loadu_ps(bj), even,
                                                                      _mm512_loadu_ps(bj + 16));
                    acc = j == 0 ? v : maxnan16(v, acc);
                }
                _mm512_mask_storeu_ps(orow + ow, head16(OW - ow), acc);
            }
        }
    }
}

static int pool_buf_size(const mk_conv_geom *g) { return POOL_CHUNK * pool_row_floats(g); }

int mk_max_pool2d_rows_buf_f32_avx512(const mk_conv_geom *g) { return pool_buf_size(g); }

void mk_max_pool2d_rows_f32_avx512(const mk_conv_geom *g, const float *xp, int ybase, float *o,
                                   float *buf, int oh0, int oh1) {
    pool_rows(g, xp, ybase, o, buf, oh0, oh1);
}

/* Unit input column stride and column stride 1 or 2 (else returns 0: the caller runs pool.c). */
int mk_max_pool2d_f32_avx512(const mk_conv_geom *g, const float *x, float *out, int nthreads) {
    if (g->sw != 1 || (g->sx != 1 && g->sx != 2)) return 0;
    const ptrdiff_t ohw = (ptrdiff_t)g->OH * g->OW;
    const int planes = g->N * g->C;
    if ((double)planes * ohw * g->KH * g->KW < 3e4) nthreads = 1;
    const int nb = pool_buf_size(g);
    int ok = 1;
    mk_team_clock clk;
    nthreads = mk_team_begin(nthreads, &clk);
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
        float *buf = (float *)malloc(sizeof(float) * (size_t)nb);
        if (!buf) {
#pragma omp atomic write
            ok = 0;
        } else {
            for (int i = 0; i < nb; i++) buf[i] = -INFINITY;
        }
        MK_TEAM_BARRIER(&clk);
        if (ok) {
#pragma omp for schedule(dynamic, 4) nowait
            for (int pc = 0; pc < planes; pc++)
                pool_rows(g, x + (pc / g->C) * g->sn + (pc % g->C) * g->sc, 0,
                          out + (ptrdiff_t)pc * ohw, buf, 0, g->OH);
        }
        free(buf);
        MK_TEAM_DONE(&clk);
    }
    mk_team_end(&clk);
    return ok;
}

#else /* not x86 */
#include "conv.h"

/* No AVX-512 pooling here: returns 0, the caller runs pool.c. */
int mk_max_pool2d_f32_avx512(const mk_conv_geom *g, const float *x, float *out, int nthreads) {
    (void)g, (void)x, (void)out, (void)nthreads;
    return 0;
}

#endif /* MK_X86 */

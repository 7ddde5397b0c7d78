/* Statically quantized (qu8) depthwise convolution over NHWC bytes (see qgemm.h): per output
 * pixel and channel, the exact sum of (x - zp) * w over the window, then qgemm.h's epilogue.
 *
 * The sums are accumulated in float32, which is exact here: each product is an integer of
 * magnitude at most 255 * 127 and at most MK_QDW_MAX_TAPS of them keep every partial sum below
 * 2^24, so the result is the int32 scheme's, bit for bit. The portable loops (channels
 * innermost, contiguous) run at the generic level and, compiled for AVX2+FMA, at the AVX2
 * level; the AVX-512 kernel keeps each block of 16 channels of a pixel in a register over the
 * window and ends in the GEMM tiles' epilogue (qgemm-epilogue-avx512.h). Every sum is exact
 * in any order (the AVX-512 interior adds one partial sum per kernel row), and every path
 * ends in the same epilogue, so they agree bit for bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "isa.h"
#include "common/team.h"
#include "mk_omp.h"
#include "qgemm.h"

#define CP(c) (((c) + 15) & ~(size_t)15)
#define MK_QDW_MAX_ROWS 512 /* kh <= MK_QDW_MAX_TAPS */
#define MK_QDW_UNIT 128     /* channels of a work item (a multiple of 64) */

size_t mk_qdw_packed_size(size_t c, size_t taps) { return (taps + 2) * CP(c) * sizeof(float); }

void mk_qdw_pack(size_t c, size_t taps, const int8_t *qw, const float *scale, const float *bias,
                 float *packed) {
    const size_t cp = CP(c);
    memset(packed, 0, mk_qdw_packed_size(c, taps));
    for (size_t ch = 0; ch < c; ch++) {
        for (size_t t = 0; t < taps; t++) packed[t * cp + ch] = (float)qw[ch * taps + t];
        packed[taps * cp + ch] = scale[ch];
        packed[(taps + 1) * cp + ch] = bias != NULL ? bias[ch] : 0.0f;
    }
}

void mk_qdw_unpack(size_t c, size_t taps, const float *packed, int8_t *qw, float *scale,
                   float *bias) {
    const size_t cp = CP(c);
    for (size_t ch = 0; ch < c; ch++) {
        for (size_t t = 0; t < taps; t++) qw[ch * taps + t] = (int8_t)packed[t * cp + ch];
        scale[ch] = packed[taps * cp + ch];
        if (bias != NULL) bias[ch] = packed[(taps + 1) * cp + ch];
    }
}

/* output rows [t0, t1) of n * oh, channels [c0, c1); acc: cp floats of scratch */
static inline __attribute__((always_inline)) void
qdw_rows(const mk_qconv_geom *g, const uint8_t *x, int32_t in_zp, float in_scale,
         const float *packed, const uint8_t *res, const mk_qgemm_epilogue *ep, void *y,
         size_t t0, size_t t1, size_t c0, size_t c1, float *acc) {
    const size_t c = g->cin, cp = CP(c), taps = g->kh * g->kw;
    const float *ws = packed + taps * cp, *bias = ws + cp;
    const float zp = (float)in_zp;
    for (size_t t = t0; t < t1; t++) {
        const size_t b = t / g->oh, oy = t % g->oh;
        for (size_t ox = 0; ox < g->ow; ox++) {
            for (size_t ch = c0; ch < c1; ch++) acc[ch] = 0.0f;
            for (size_t ky = 0; ky < g->kh; ky++) {
                const ptrdiff_t iy = (ptrdiff_t)(oy * g->sh + ky * g->dh) - (ptrdiff_t)g->ph;
                if (iy < 0 || (size_t)iy >= g->h) continue; /* (x - zp) is 0 there */
                for (size_t kx = 0; kx < g->kw; kx++) {
                    const ptrdiff_t ix = (ptrdiff_t)(ox * g->sw + kx * g->dw) - (ptrdiff_t)g->pw;
                    if (ix < 0 || (size_t)ix >= g->w) continue;
                    const uint8_t *xp = x + ((b * g->h + (size_t)iy) * g->w + (size_t)ix) * c;
                    const float *w = packed + (ky * g->kw + kx) * cp;
                    for (size_t ch = c0; ch < c1; ch++)
                        acc[ch] = fmaf((float)xp[ch] - zp, w[ch], acc[ch]);
                }
            }
            const size_t row = t * g->ow + ox;
            const uint8_t *r = res != NULL ? res + row * c : NULL;
            float *yf = (float *)y + row * c;
            uint8_t *yq = (uint8_t *)y + row * c;
            for (size_t ch = c0; ch < c1; ch++) {
                float v = fmaf(acc[ch], in_scale * ws[ch], bias[ch]);
                if (r != NULL) v = fmaf((float)((int32_t)r[ch] - ep->res_zp), ep->res_scale, v);
                v = ep->lo > v ? ep->lo : v;
                v = ep->hi < v ? ep->hi : v;
                if (ep->out_u8)
                    yq[ch] = mk_qu8_requantize(v, ep->out_inv_scale, ep->out_zp);
                else
                    yf[ch] = v;
            }
        }
    }
}

static void qdw_rows_generic(const mk_qconv_geom *g, const uint8_t *x, int32_t in_zp,
                             float in_scale, const float *packed, const uint8_t *res,
                             const mk_qgemm_epilogue *ep, void *y, size_t t0, size_t t1,
                             size_t c0, size_t c1, float *acc) {
    qdw_rows(g, x, in_zp, in_scale, packed, res, ep, y, t0, t1, c0, c1, acc);
}

#if MK_X86
#include <immintrin.h>

#include "qgemm-epilogue-avx512.h"

__attribute__((target("avx2,fma"))) static void
qdw_rows_avx2(const mk_qconv_geom *g, const uint8_t *x, int32_t in_zp, float in_scale,
              const float *packed, const uint8_t *res, const mk_qgemm_epilogue *ep, void *y,
              size_t t0, size_t t1, size_t c0, size_t c1, float *acc) {
    qdw_rows(g, x, in_zp, in_scale, packed, res, ep, y, t0, t1, c0, c1, acc);
}

/* The AVX-512 rows, one block of 16 channels at a time: the input rows a run of output rows
 * reads, that block's lanes converted once to float32 (x - zp) into a cache of kh rows
 * (`acc`: kh rows of w x 16 floats, then kh tags; 3 x 112 pixels is 21 KiB, in L1) that
 * consecutive output rows share; then for each output pixel the window summed from the cached
 * rows (a 3x3 window inside the image: the nine weight vectors held in registers, one partial
 * sum per kernel row). */
MK_QEPI_TARGET static inline const float *
qdw_row_avx512(const mk_qconv_geom *g, const uint8_t *x, __m512 vzp, __mmask16 m, size_t c0,
               float *cache, size_t *tags, size_t b, size_t iy, const size_t *keep,
               size_t nkeep) {
    const size_t c = g->cin, w16 = g->w * 16, tag = b * g->h + iy + 1;
    size_t slot = g->kh;
    for (size_t i = 0; i < g->kh && slot == g->kh; i++)
        if (tags[i] == tag) return cache + i * w16;
    for (size_t i = 0; i < g->kh && slot == g->kh; i++) { /* a slot this window does not read */
        size_t used = 0;
        for (size_t j = 0; j < nkeep; j++) used |= tags[i] == keep[j];
        if (!used) slot = i;
    }
    float *dst = cache + slot * w16;
    const uint8_t *src = x + ((b * g->h + iy) * g->w) * c + c0;
    if (m == 0xffff) { /* four pixels a step */
        const uint8_t *sp = src;
        float *dp = dst;
#define MK_QDW_CVT(i)                                                                         \
    _mm512_store_ps(dp + (i) * 16,                                                            \
                    _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(                    \
                                      _mm_loadu_si128((const __m128i *)(sp + (i) * c)))),    \
                                  vzp))
        size_t ix = 0;
        for (; ix + 4 <= g->w; ix += 4, sp += 4 * c, dp += 64) {
            MK_QDW_CVT(0);
            MK_QDW_CVT(1);
            MK_QDW_CVT(2);
            MK_QDW_CVT(3);
        }
        for (; ix < g->w; ix++, sp += c, dp += 16) MK_QDW_CVT(0);
#undef MK_QDW_CVT
    } else /* the last block's lanes past c stay 0 */
        for (size_t ix = 0; ix < g->w; ix++)
            _mm512_store_ps(dst + ix * 16,
                            _mm512_maskz_sub_ps(m, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                                                       _mm_maskz_loadu_epi8(m, src + ix * c))),
                                                vzp));
    tags[slot] = tag;
    return dst;
}

/* One output pixel of the block from its cached rows, any window (taps outside the image or
 * on rows not cached skipped: (x - zp) is 0 there); the block's weights w (taps cp apart). */
MK_QEPI_TARGET static inline __attribute__((always_inline)) __m512
qdw_window_avx512(const mk_qconv_geom *g, const float *const *rows, const float *w, size_t cp,
                  size_t ox) {
    __m512 a = _mm512_setzero_ps();
    const ptrdiff_t x0 = (ptrdiff_t)(ox * g->sw) - (ptrdiff_t)g->pw;
    for (size_t ky = 0; ky < g->kh; ky++) {
        if (rows[ky] == NULL) continue;
        for (size_t kx = 0; kx < g->kw; kx++) {
            const ptrdiff_t ix = x0 + (ptrdiff_t)(kx * g->dw);
            if (ix < 0 || (size_t)ix >= g->w) continue;
            a = _mm512_fmadd_ps(_mm512_load_ps(rows[ky] + (size_t)ix * 16),
                                _mm512_load_ps(w + (ky * g->kw + kx) * cp), a);
        }
    }
    return a;
}

MK_QEPI_TARGET static void
qdw_rows_avx512(const mk_qconv_geom *g, const uint8_t *x, int32_t in_zp, float in_scale,
                const float *packed, const uint8_t *res, const mk_qgemm_epilogue *ep_in,
                void *y, size_t t0, size_t t1, size_t ch0, size_t ch1, float *acc) {
    /* a local copy: the stores through y cannot change it, so its tests leave the loops */
    const mk_qgemm_epilogue epl = *ep_in, *ep = &epl;
    const size_t c = g->cin, cp = CP(c), taps = g->kh * g->kw, kh = g->kh, kw = g->kw;
    const float *ws = packed + taps * cp, *bias = ws + cp;
    const __m512 vzp = _mm512_set1_ps((float)in_zp), vs = _mm512_set1_ps(in_scale);
    const size_t width = ep->out_u8 ? 1 : sizeof(float), ystep = c * width;
    size_t *tags = (size_t *)(acc + kh * g->w * 16); /* 0: empty; else b * h + iy + 1 */
    const float *rows[MK_QDW_MAX_ROWS];
    size_t keep[MK_QDW_MAX_ROWS];
    mk_qepi_panel pc; /* mk_qepi_store16 reads its lo, hi and has_hi */
    pc.lo = _mm512_set1_ps(ep->lo);
    pc.hi = _mm512_set1_ps(ep->hi);
    pc.has_hi = ep->hi < INFINITY;
    /* output columns whose window lies inside the image: [ox0, ox1) */
    size_t ox0 = (g->pw + g->sw - 1) / g->sw, ox1 = 0;
    if (g->w + g->pw >= (kw - 1) * g->dw + 1)
        ox1 = (g->w + g->pw - (kw - 1) * g->dw - 1) / g->sw + 1;
    ox1 = ox1 < g->ow ? ox1 : g->ow;
    ox0 = ox0 < ox1 ? ox0 : ox1;
    const int fast3 = kh == 3 && kw == 3 && g->dw == 1;
    const size_t step = g->sw * 16; /* cached floats from one output pixel to the next */
    for (size_t c0 = ch0; c0 < ch1; c0 += 16) {
        const __mmask16 m = c - c0 >= 16 ? 0xffff : (__mmask16)((1u << (c - c0)) - 1);
        const __m512 sc = _mm512_mul_ps(vs, _mm512_load_ps(ws + c0));
        const __m512 bi = _mm512_load_ps(bias + c0);
        const float *w = packed + c0;
        __m512 w0 = _mm512_setzero_ps(), w1 = w0, w2 = w0, w3 = w0, w4 = w0, w5 = w0, w6 = w0,
               w7 = w0, w8 = w0; /* the 3x3 window's weights */
        if (fast3) {
            w0 = _mm512_load_ps(w);
            w1 = _mm512_load_ps(w + cp);
            w2 = _mm512_load_ps(w + 2 * cp);
            w3 = _mm512_load_ps(w + 3 * cp);
            w4 = _mm512_load_ps(w + 4 * cp);
            w5 = _mm512_load_ps(w + 5 * cp);
            w6 = _mm512_load_ps(w + 6 * cp);
            w7 = _mm512_load_ps(w + 7 * cp);
            w8 = _mm512_load_ps(w + 8 * cp);
        }
        for (size_t i = 0; i < kh; i++) tags[i] = 0;
        for (size_t t = t0; t < t1; t++) {
            const size_t b = t / g->oh, oy = t % g->oh, row0 = t * g->ow;
            size_t nkeep = 0;
            for (size_t ky = 0; ky < kh; ky++) {
                const ptrdiff_t iy = (ptrdiff_t)(oy * g->sh + ky * g->dh) - (ptrdiff_t)g->ph;
                if (iy >= 0 && (size_t)iy < g->h) keep[nkeep++] = b * g->h + (size_t)iy + 1;
            }
            for (size_t ky = 0; ky < kh; ky++) {
                const ptrdiff_t iy = (ptrdiff_t)(oy * g->sh + ky * g->dh) - (ptrdiff_t)g->ph;
                rows[ky] = iy < 0 || (size_t)iy >= g->h
                               ? NULL
                               : qdw_row_avx512(g, x, vzp, m, c0, acc, tags, b, (size_t)iy,
                                                keep, nkeep);
            }
            const int inside = fast3 && rows[0] != NULL && rows[1] != NULL && rows[2] != NULL;
            /* the interior columns (a whole 3x3 window in the cached rows), or none */
            const size_t in0 = inside ? ox0 : g->ow, in1 = inside ? ox1 : g->ow;
            const uint8_t *rr = res != NULL ? res + row0 * c + c0 : NULL;
            char *yo = (char *)y + (row0 * c + c0) * width;
            size_t ox = 0;
            for (; ox < in0; ox++, yo += ystep, rr = rr != NULL ? rr + c : NULL)
                mk_qepi_store16(_mm512_fmadd_ps(qdw_window_avx512(g, rows, w, cp, ox), sc, bi),
                                m, &pc, rr, yo, ep);
            if (ox < in1) {
                const float *r0 = rows[0] + (ox * g->sw - g->pw) * 16,
                            *r1 = rows[1] + (ox * g->sw - g->pw) * 16,
                            *r2 = rows[2] + (ox * g->sw - g->pw) * 16;
                for (; ox < in1; ox++, yo += ystep, rr = rr != NULL ? rr + c : NULL) {
                    /* the sums are exact (see the top of the file): any order, the same bits */
                    __m512 a0 = _mm512_mul_ps(_mm512_load_ps(r0), w0);
                    __m512 a1 = _mm512_mul_ps(_mm512_load_ps(r1), w3);
                    __m512 a2 = _mm512_mul_ps(_mm512_load_ps(r2), w6);
                    a0 = _mm512_fmadd_ps(_mm512_load_ps(r0 + 16), w1, a0);
                    a1 = _mm512_fmadd_ps(_mm512_load_ps(r1 + 16), w4, a1);
                    a2 = _mm512_fmadd_ps(_mm512_load_ps(r2 + 16), w7, a2);
                    a0 = _mm512_fmadd_ps(_mm512_load_ps(r0 + 32), w2, a0);
                    a1 = _mm512_fmadd_ps(_mm512_load_ps(r1 + 32), w5, a1);
                    a2 = _mm512_fmadd_ps(_mm512_load_ps(r2 + 32), w8, a2);
                    const __m512 sum = _mm512_add_ps(_mm512_add_ps(a0, a1), a2);
                    mk_qepi_store16(_mm512_fmadd_ps(sum, sc, bi), m, &pc, rr, yo, ep);
                    r0 += step;
                    r1 += step;
                    r2 += step;
                }
            }
            for (; ox < g->ow; ox++, yo += ystep, rr = rr != NULL ? rr + c : NULL)
                mk_qepi_store16(_mm512_fmadd_ps(qdw_window_avx512(g, rows, w, cp, ox), sc, bi),
                                m, &pc, rr, yo, ep);
        }
    }
}
#endif

typedef void (*qdw_rows_fn)(const mk_qconv_geom *, const uint8_t *, int32_t, float,
                            const float *, const uint8_t *, const mk_qgemm_epilogue *, void *,
                            size_t, size_t, size_t, size_t, float *);

/* The rows function of an ISA level and its scratch per thread (floats): the portable loops'
 * sums (cp floats); AVX-512's converted rows (+ the row tags, size_t) */
static qdw_rows_fn qdw_rows_of(int isa, const mk_qconv_geom *g, size_t *scratch) {
    *scratch = CP(g->cin);
#if MK_X86
    if (isa >= MK_ISA_AVX512) {
        *scratch = g->kh * g->w * 16 + 2 * g->kh;
        return qdw_rows_avx512;
    }
    if (isa >= MK_ISA_AVX2) return qdw_rows_avx2;
#else
    (void)isa;
#endif
    return qdw_rows_generic;
}

size_t mk_qdw_scratch_bytes(int isa, const mk_qconv_geom *g) {
    size_t scratch;
    qdw_rows_of(isa, g, &scratch);
    return (scratch * sizeof(float) + 63) & ~(size_t)63;
}

void mk_qdw_rows(int isa, const mk_qconv_geom *g, const uint8_t *x, int32_t in_zp,
                 float in_scale, const float *packed, const uint8_t *res,
                 const mk_qgemm_epilogue *ep, void *y, size_t t0, size_t t1, float *scratch) {
    size_t floats;
    qdw_rows_of(isa, g, &floats)(g, x, in_zp, in_scale, packed, res, ep, y, t0, t1, 0, g->cin,
                                 scratch);
}

int mk_qdw_run(int isa, const mk_qconv_geom *g, const uint8_t *x, int32_t in_zp,
               float in_scale, const float *packed, const uint8_t *res,
               const mk_qgemm_epilogue *ep, void *y, int nthreads) {
    const size_t rows = g->n * g->oh;
    if (rows == 0 || g->ow == 0 || g->cin == 0) return 0;
    size_t scratch;
    const qdw_rows_fn fn = qdw_rows_of(isa, g, &scratch);
    const double macs = (double)rows * (double)(g->ow * g->cin * g->kh * g->kw);
    int nt = macs < (1u << 17) ? 1 : nthreads;
    /* Work items: MK_QDW_UNIT channels (whole cache lines of output bytes per pixel, so no
     * two threads write one line) over a run of consecutive output rows (the AVX-512 rows
     * reuse the converted input rows along a run; a run re-reads kh - sh rows). Whole
     * columns of rows where the channels give every thread 4 items, else the rows cut into
     * runs until they do. Items of one unit are consecutive: threads working at once write
     * other rows. */
    const size_t units = (g->cin + MK_QDW_UNIT - 1) / MK_QDW_UNIT;
    size_t nruns = nt > 1 ? (4 * (size_t)nt + units - 1) / units : 1;
    nruns = nruns < rows ? nruns : rows;
    const size_t run = (rows + nruns - 1) / nruns;
    nruns = (rows + run - 1) / run;
    const size_t items = units * nruns;
    int failed = 0;
    mk_team_clock clk;
    nt = mk_team_begin(nt, &clk);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        float *acc = (float *)aligned_alloc(64, (scratch * sizeof(float) + 63) & ~(size_t)63);
        if (acc == NULL) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1) nowait
        for (long i = 0; i < (long)items; i++)
            if (acc != NULL) {
                const size_t u = (size_t)i / nruns, r = (size_t)i % nruns;
                const size_t t0 = r * run, t1 = t0 + run < rows ? t0 + run : rows;
                const size_t c0 = u * MK_QDW_UNIT,
                             c1 = c0 + MK_QDW_UNIT < g->cin ? c0 + MK_QDW_UNIT : g->cin;
                fn(g, x, in_zp, in_scale, packed, res, ep, y, t0, t1, c0, c1, acc);
            }
        free(acc);
        MK_TEAM_DONE(&clk);
    }
    mk_team_end(&clk);
    return failed ? -1 : 0;
}

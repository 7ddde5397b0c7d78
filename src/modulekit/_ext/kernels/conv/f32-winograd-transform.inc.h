/* Winograd F(M x M, 3 x 3) input and output transforms, float32, one instantiation per tile
 * size and instruction set: the including file defines
 *     WINO_M       output tile size (2 or 4); the input tile is WINO_A = WINO_M + 2
 *     WINO_TARGET  function attribute (MK_T512, MK_T256 or empty)
 *     WINO_VL      lanes of the vectors the loops use (16, 8 or 4)
 *     WINO_IN, WINO_OUT  the names of the two functions
 * (one instantiation per translation unit: its helpers are static). The loops use GCC/clang
 * vector extensions of WINO_VL floats (lowered to the target's registers; no intrinsics, so
 * the portable path compiles the same code for any CPU) and run over whole vectors into the
 * rows' padding (every scratch row is padded to a multiple of 16 plus slack):
 *   input:  B^T down the window rows, along whole input rows (contiguous); the rows are then
 *           cut into the windows' columns (S[i][j][l], tile l, one strided copy per element)
 *           and B^T across the columns runs over all the block's tiles at once (contiguous);
 *   output: A^T down the rows over all the block's tiles (contiguous), then A^T across the
 *           columns per tile row (an interleaved store group of exactly M lanes), cut to the
 *           output and stored with the residual and the activation.
 * Operands: see mk_wino_in_fn / mk_wino_out_fn in conv.h.
 *
 * Matrices (Lavin & Gray 2015). F(2x2, 3x3), points 0, 1, -1:
 *     B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]     A^T = [1 1 1 0; 0 1 -1 -1]
 * F(4x4, 3x3), points 0, 1, -1, 2, -2:
 *     B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0;
 *            0 4 0 -5 0 1]
 *     A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]
 * Column 1 of A^T is all ones in both, so a constant added to element (1, 1) of the transformed
 * product reaches every output pixel: that is where the packed weights carry the bias. */
#include <string.h>

#define WINO_A (WINO_M + 2)
#define WINO_RS(n) (((ptrdiff_t)(n) + 15) & ~(ptrdiff_t)15)
#define WINO_UP(n) (((n) + WINO_VL - 1) / WINO_VL * WINO_VL)

typedef float wvf __attribute__((vector_size(4 * WINO_VL), aligned(4), may_alias));
typedef int wvi __attribute__((vector_size(4 * WINO_VL), aligned(4), may_alias));
#define LD(p) (*(const wvf *)(p))
#define ST(p, v) (*(wvf *)(p) = (v))

/* two-vector shuffles: even / odd lanes of (a, b); interleave of the low / high halves */
#if WINO_VL == 16
#define W_EVEN 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30
#define W_ODD 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31
#define W_ZLO 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23
#define W_ZHI 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31
#elif WINO_VL == 8
#define W_EVEN 0, 2, 4, 6, 8, 10, 12, 14
#define W_ODD 1, 3, 5, 7, 9, 11, 13, 15
#define W_ZLO 0, 8, 1, 9, 2, 10, 3, 11
#define W_ZHI 4, 12, 5, 13, 6, 14, 7, 15
#else
#define W_EVEN 0, 2, 4, 6
#define W_ODD 1, 3, 5, 7
#define W_ZLO 0, 4, 1, 5
#define W_ZHI 2, 6, 3, 7
#endif
/* the row activation of this ISA (common/act.h: the bits of every other kernel's epilogue) */
#if WINO_VL == 16
#define WINO_VACT mk_f32_vact__avx512
#elif WINO_VL == 8
#define WINO_VACT mk_f32_vact__avx2
#else
#define WINO_VACT mk_f32_vact__scalar
#endif
#if defined(__clang__)
#define SHUF(a, b, idx) __builtin_shufflevector(a, b, idx)
#else
#define SHUF(a, b, idx) __builtin_shuffle(a, b, (wvi){idx})
#endif

/* r[i][l] = sum_j B^T[i][j] d[j][l] for l < n rounded up to whole vectors, r[i] = r + i*rs */
WINO_TARGET static inline void wino_bt(const float *const *d, float *r, ptrdiff_t rs, int n) {
    const float *d0 = d[0], *d1 = d[1], *d2 = d[2], *d3 = d[3];
    float *r0 = r, *r1 = r + rs, *r2 = r + 2 * rs, *r3 = r + 3 * rs;
#if WINO_M == 2
    for (int i = 0; i < n; i += WINO_VL) {
        const wvf a0 = LD(d0 + i), a1 = LD(d1 + i), a2 = LD(d2 + i), a3 = LD(d3 + i);
        ST(r0 + i, a0 - a2);
        ST(r1 + i, a1 + a2);
        ST(r2 + i, a2 - a1);
        ST(r3 + i, a1 - a3);
    }
#else
    const float *d4 = d[4], *d5 = d[5];
    float *r4 = r + 4 * rs, *r5 = r + 5 * rs;
    for (int i = 0; i < n; i += WINO_VL) {
        const wvf a0 = LD(d0 + i), a1 = LD(d1 + i), a2 = LD(d2 + i), a3 = LD(d3 + i);
        const wvf a4 = LD(d4 + i), a5 = LD(d5 + i);
        const wvf t0 = a4 - 4.0f * a2, t1 = a3 - 4.0f * a1, t2 = a4 - a2, t3 = 2.0f * (a3 - a1);
        ST(r0 + i, 4.0f * a0 - 5.0f * a2 + a4);
        ST(r1 + i, t0 + t1);
        ST(r2 + i, t0 - t1);
        ST(r3 + i, t2 + t3);
        ST(r4 + i, t2 - t3);
        ST(r5 + i, 4.0f * a1 - 5.0f * a3 + a5);
    }
#endif
}

/* Input transform of one channel over a block of tiles (see mk_wino_in_fn). */
WINO_TARGET void WINO_IN(const float *x, ptrdiff_t sn, ptrdiff_t sh, int H, int W,
                         const mk_wino_seg *segs, int nseg, int nl, float *v, ptrdiff_t vs,
                         float *buf) {
    int maxnt = 0;
    for (int s = 0; s < nseg; s++) maxnt = segs[s].nt > maxnt ? segs[s].nt : maxnt;
    const ptrdiff_t lw = WINO_RS(maxnt * WINO_M + 2) + 64, ss = WINO_RS(nl) + 16;
    float *lines = buf;                        /* WINO_A input rows, zero padded */
    float *vert = lines + WINO_A * lw;         /* B^T down the window rows */
    float *S = vert + WINO_A * lw;             /* S[i][j][l] = window element (i, j) of tile l */
    for (int s = 0; s < nseg; s++) {
        const mk_wino_seg *sg = segs + s;
        const int nt = sg->nt, y0 = sg->y0, x0 = sg->x0;
        const int width = nt * WINO_M + 2;    /* padded input columns the tiles read */
        const float *xi = x + sg->n * sn;
        const float *d[WINO_A];
        /* rows read in place when the whole vectors stay inside the row */
        const int inside = x0 >= 0 && x0 + WINO_UP(width) <= W;
        for (int j = 0; j < WINO_A; j++) {
            const int y = y0 + j;
            if (inside && y >= 0 && y < H) {
                d[j] = xi + y * sh + x0;
                continue;
            }
            float *ln = lines + j * lw;
            d[j] = ln;
            if (y < 0 || y >= H) {
                memset(ln, 0, sizeof(float) * (size_t)width);
                continue;
            }
            const float *xr = xi + y * sh;
            int c0 = x0 < 0 ? -x0 : 0, c1 = W - x0 < width ? W - x0 : width;
            if (c1 < c0) c1 = c0;
            for (int c = 0; c < c0; c++) ln[c] = 0.0f;
            memcpy(ln + c0, xr + x0 + c0, sizeof(float) * (size_t)(c1 - c0));
            for (int c = c1; c < width; c++) ln[c] = 0.0f;
        }
        wino_bt(d, vert, lw, width);
        /* cut the rows into the windows' columns: S[i][j][l0 + l] = vert[i][l * M + j];
         * columns j >= M are columns j - M of the next tile */
        for (int i = 0; i < WINO_A; i++) {
            const float *w = vert + i * lw;
            float *s0 = S + (i * WINO_A) * ss + sg->l0;
            float *s1 = s0 + ss, *s2 = s0 + 2 * ss, *s3 = s0 + 3 * ss;
#if WINO_M == 2
            for (int l = 0; l < nt; l += WINO_VL) {
                const wvf a = LD(w + 2 * l), b = LD(w + 2 * l + WINO_VL);
                ST(s0 + l, SHUF(a, b, W_EVEN));
                ST(s1 + l, SHUF(a, b, W_ODD));
            }
            for (int l = 0; l < nt; l += WINO_VL) { /* whole vectors: the last lane after */
                ST(s2 + l, LD(s0 + 1 + l));
                ST(s3 + l, LD(s1 + 1 + l));
            }
            s2[nt - 1] = w[2 * nt];
            s3[nt - 1] = w[2 * nt + 1];
#else
            float *s4 = s0 + 4 * ss, *s5 = s0 + 5 * ss;
            for (int l = 0; l < nt; l += WINO_VL) {
                const float *wl = w + 4 * l;
                const wvf a = LD(wl), b = LD(wl + WINO_VL), c = LD(wl + 2 * WINO_VL),
                          e = LD(wl + 3 * WINO_VL);
                const wvf e01 = SHUF(a, b, W_EVEN), o01 = SHUF(a, b, W_ODD);
                const wvf e23 = SHUF(c, e, W_EVEN), o23 = SHUF(c, e, W_ODD);
                ST(s0 + l, SHUF(e01, e23, W_EVEN));
                ST(s2 + l, SHUF(e01, e23, W_ODD));
                ST(s1 + l, SHUF(o01, o23, W_EVEN));
                ST(s3 + l, SHUF(o01, o23, W_ODD));
            }
            for (int l = 0; l < nt; l += WINO_VL) { /* whole vectors: the last lane after */
                ST(s4 + l, LD(s0 + 1 + l));
                ST(s5 + l, LD(s1 + 1 + l));
            }
            s4[nt - 1] = w[4 * nt];
            s5[nt - 1] = w[4 * nt + 1];
#endif
        }
    }
    /* B^T across the columns, all the block's tiles at once */
    for (int i = 0; i < WINO_A; i++) {
        const float *d[WINO_A];
        for (int j = 0; j < WINO_A; j++) d[j] = S + (i * WINO_A + j) * ss;
        wino_bt(d, v + i * WINO_A * vs, vs, nl);
    }
}

/* Output transform of one output channel over a block of tiles (see mk_wino_out_fn). */
WINO_TARGET void WINO_OUT(const float *m, ptrdiff_t ms, const mk_wino_seg *segs, int nseg,
                          int nl, float *buf, float *out, const float *res, ptrdiff_t os,
                          int act) {
    int maxnt = 0;
    for (int s = 0; s < nseg; s++) maxnt = segs[s].nt > maxnt ? segs[s].nt : maxnt;
    const ptrdiff_t zs = WINO_RS(nl) + 16, ys = WINO_RS(maxnt * WINO_M) + 64;
    float *z = buf;                            /* z[r][k][l]: A^T down the rows */
    float *y = z + WINO_M * WINO_A * zs;       /* WINO_M output rows of one run */
    for (int k = 0; k < WINO_A; k++) {
        const float *m0 = m + (0 * WINO_A + k) * ms, *m1 = m + (1 * WINO_A + k) * ms;
        const float *m2 = m + (2 * WINO_A + k) * ms, *m3 = m + (3 * WINO_A + k) * ms;
        float *z0 = z + k * zs, *z1 = z + (WINO_A + k) * zs;
#if WINO_M == 2
        for (int l = 0; l < nl; l += WINO_VL) {
            const wvf a1 = LD(m1 + l), a2 = LD(m2 + l);
            ST(z0 + l, LD(m0 + l) + a1 + a2);
            ST(z1 + l, a1 - a2 - LD(m3 + l));
        }
#else
        const float *m4 = m + (4 * WINO_A + k) * ms, *m5 = m + (5 * WINO_A + k) * ms;
        float *z2 = z + (2 * WINO_A + k) * zs, *z3 = z + (3 * WINO_A + k) * zs;
        for (int l = 0; l < nl; l += WINO_VL) {
            const wvf a1 = LD(m1 + l), a2 = LD(m2 + l), a3 = LD(m3 + l), a4 = LD(m4 + l);
            const wvf s12 = a1 + a2, d12 = a1 - a2, s34 = a3 + a4, d34 = a3 - a4;
            ST(z0 + l, LD(m0 + l) + s12 + s34);
            ST(z1 + l, d12 + 2.0f * d34);
            ST(z2 + l, s12 + 4.0f * s34);
            ST(z3 + l, d12 + 8.0f * d34 + LD(m5 + l));
        }
#endif
    }
    const wvf zero = {0};
    for (int s = 0; s < nseg; s++) {
        const mk_wino_seg *sg = segs + s;
        const int nt = sg->nt;
        for (int r = 0; r < WINO_M; r++) {
            const float *zr = z + r * WINO_A * zs + sg->l0;
            float *yr = y + r * ys;
#if WINO_M == 2
            for (int l = 0; l < nt; l += WINO_VL) {
                const wvf a1 = LD(zr + zs + l), a2 = LD(zr + 2 * zs + l);
                const wvf c0 = LD(zr + l) + a1 + a2, c1 = a1 - a2 - LD(zr + 3 * zs + l);
                ST(yr + 2 * l, SHUF(c0, c1, W_ZLO));
                ST(yr + 2 * l + WINO_VL, SHUF(c0, c1, W_ZHI));
            }
#else
            for (int l = 0; l < nt; l += WINO_VL) {
                const wvf a1 = LD(zr + zs + l), a2 = LD(zr + 2 * zs + l);
                const wvf a3 = LD(zr + 3 * zs + l), a4 = LD(zr + 4 * zs + l);
                const wvf s12 = a1 + a2, d12 = a1 - a2, s34 = a3 + a4, d34 = a3 - a4;
                const wvf c0 = LD(zr + l) + s12 + s34, c1 = d12 + 2.0f * d34;
                const wvf c2 = s12 + 4.0f * s34, c3 = d12 + 8.0f * d34 + LD(zr + 5 * zs + l);
                /* out[4l + c] = c_c[l]: interleave (c0, c2) and (c1, c3), then the pairs */
                const wvf p0 = SHUF(c0, c2, W_ZLO), p1 = SHUF(c0, c2, W_ZHI);
                const wvf q0 = SHUF(c1, c3, W_ZLO), q1 = SHUF(c1, c3, W_ZHI);
                float *yl = yr + 4 * l;
                ST(yl, SHUF(p0, q0, W_ZLO));
                ST(yl + WINO_VL, SHUF(p0, q0, W_ZHI));
                ST(yl + 2 * WINO_VL, SHUF(p1, q1, W_ZLO));
                ST(yl + 3 * WINO_VL, SHUF(p1, q1, W_ZHI));
            }
#endif
        }
        /* store the valid rows/columns: + residual, activation (NaN kept, as mk_act_f32) */
        const int rows = sg->rows, cols = sg->cols, cv = cols / WINO_VL * WINO_VL;
        for (int r = 0; r < rows; r++) {
            const float *yr = y + r * ys;
            float *o = out + sg->ooff + r * os;
            const float *rs = res ? res + sg->ooff + r * os : NULL;
            if (act == MK_ACT_RELU || act == MK_ACT_NONE) {
                int c = 0;
                for (; c < cv; c += WINO_VL) {
                    wvf t = LD(yr + c);
                    if (rs) t += LD(rs + c);
                    if (act == MK_ACT_RELU) t = (wvf)((wvi)t & ~(t < zero)); /* NaN: kept */
                    ST(o + c, t);
                }
                for (; c < cols; c++) {
                    float t = yr[c] + (rs ? rs[c] : 0.0f);
                    o[c] = act == MK_ACT_RELU && t < 0.0f ? 0.0f : t;
                }
            } else { /* the other activations: the shared row function of this ISA */
                for (int c = 0; c < cols; c++) o[c] = yr[c] + (rs ? rs[c] : 0.0f);
                WINO_VACT(cols, o, o, act, 0.0f, 0.0f);
            }
        }
    }
}

#undef SHUF
#undef WINO_VACT
#undef W_EVEN
#undef W_ODD
#undef W_ZLO
#undef W_ZHI
#undef LD
#undef ST
#undef WINO_UP
#undef WINO_RS
#undef WINO_A

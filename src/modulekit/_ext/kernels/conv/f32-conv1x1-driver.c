/* float32 1x1 stride-1 convolution (a GEMM over the K x HW matrix of an NCHW image), AVX-512,
 * with no lane waste on pixel counts that are not a multiple of 16.
 *
 * The L pixels are covered by 8 x 48 tiles, then one 8 x 32 tile when at least 32 remain, then
 * the last < 32 pixels by the channel-lane remainder kernels (f32-conv1x1-16cx8-avx512.c) in
 * groups of up to 8 pixels (64 channels at a time for 4 pixels or fewer, so that even one
 * pixel keeps four FMA chains in flight): a 7x7 map costs 48 + 1 pixel-columns instead of
 * 2 x 32, a 14x14 map 4 x 48 + 4 instead of 7 x 32. The output channels run in groups of 8
 * panels (64 channels), each group's tiles and remainder together, so every weight panel is
 * read from L3/memory once per call, and each panel is prefetched two panels ahead (a model's
 * weights do not fit the caches: without it cold panels stream at DRAM latency, 1.3x slower on
 * the 7x7 layers); threads split the output channels in runs of panel pairs (16 channels). */
#include "conv.h"
#include "isa.h"
#include "common/team.h"
#include "mk_omp.h"

void mk_f32_conv1x1_16cx8_avx512(size_t K, const float *p0, int npan, size_t panel,
                                 const float *b, const ptrdiff_t *koff, int npx, int mrows,
                                 float *c, ptrdiff_t c_rs, const float *res, int act);
void mk_f32_conv1x1_64cx4_avx512(size_t K, const float *p0, int npan, size_t panel,
                                 const float *b, const ptrdiff_t *koff, int npx, int mrows,
                                 float *c, ptrdiff_t c_rs, const float *res, int act);

/* Ask for a weight panel (to L2) ahead of its use: weights that are not in the caches (a
 * model's first call, or after another library ran) otherwise stream at DRAM latency. */
static inline void prefetch_panel(const float *a, size_t n) {
    for (size_t i = 0; i < n; i += 16) __builtin_prefetch(a + i, 0, 2);
}

/* Panel pairs [pp0, pp1) (output channels 16*pp0 ...) of c[m, q] = act(bias[m] +
 * sum_k a[m, k] * b[koff[k] + q] (+ res[m, q])), q in [0, L); channel m's row at c + m*c_rs. */
void mk_conv1x1_band_f32(size_t K, const float *wp, int M, const float *b, const ptrdiff_t *koff,
                         ptrdiff_t L, float *c, ptrdiff_t c_rs, const float *res, int act,
                         int pp0, int pp1) {
#if !MK_X86 /* AVX-512 only: never called elsewhere (see MK_NOT_X86_UNREACHABLE) */
    MK_NOT_X86_UNREACHABLE();
#else
    const int npanels = (M + MK_CONV_MR - 1) / MK_CONV_MR;
    const size_t panel = MK_CONV_MR + K * MK_CONV_MR;
    /* the remainder kernel's int32 scatter offsets need 16 * c_rs < 2^31 */
    const int tail_ok = c_rs < ((ptrdiff_t)1 << 27);
    const ptrdiff_t L48 = L / 48 * 48;
    const ptrdiff_t L32 = L - L48 >= 32 ? L48 + 32 : L48;
    const ptrdiff_t Lv = tail_ok ? L32 : L; /* pixels computed by the pixel-lane kernels */
    /* groups of 8 panels (64 channels): their pixel-lane tiles, then their remaining pixels,
     * so each panel comes from memory or L3 once and is reused from L1/L2 (a tile-major order
     * would read all the weights a second time for the remainder) */
    const int pe = 2 * pp1 < npanels ? 2 * pp1 : npanels;
    for (int g0 = 2 * pp0; g0 < pe; g0 += 8) {
        const int g1 = g0 + 8 < pe ? g0 + 8 : pe;
        for (ptrdiff_t q0 = 0; q0 < Lv;) {
            const ptrdiff_t left = Lv - q0;
            const int nl = (int)(left >= 48 ? 48 : left);
            const mk_seg seg = {0, nl, q0};
            for (int p = g0; p < g1; p++) {
                const int rows =
                    M - p * MK_CONV_MR < MK_CONV_MR ? M - p * MK_CONV_MR : MK_CONV_MR;
                const float *a = wp + (size_t)p * panel;
                if (q0 == 0) { /* the panel two ahead (and, to start, the next one) */
                    if (p == 2 * pp0 && p + 1 < pe) prefetch_panel(a + panel, panel);
                    if (p + 2 < pe) prefetch_panel(a + 2 * panel, panel);
                }
                const ptrdiff_t co = (ptrdiff_t)p * MK_CONV_MR * c_rs;
                (nl > 32 ? mk_f32_igemm_8x48_avx512 : mk_f32_igemm_8x32_avx512)(
                    K, a, b + q0, koff, NULL, nl, rows, c + co, c_rs, res ? res + co : NULL, &seg,
                    1, act);
            }
            q0 += nl;
        }
        /* the remaining pixels: 64 channels x up to 4 pixels, or 16 channels x up to 8 */
        for (ptrdiff_t q0 = Lv; q0 < L;) {
            const int npx = (int)(L - q0 < 8 ? L - q0 : 8);
            const int wide = npx <= 4;
            for (int p = g0; p < g1; p += wide ? 8 : 2) {
                const int npan = g1 - p < (wide ? 8 : 2) ? g1 - p : (wide ? 8 : 2);
                const int rows = M - p * MK_CONV_MR < npan * MK_CONV_MR ? M - p * MK_CONV_MR
                                                                        : npan * MK_CONV_MR;
                const ptrdiff_t co = (ptrdiff_t)p * MK_CONV_MR * c_rs + q0;
                (wide ? mk_f32_conv1x1_64cx4_avx512 : mk_f32_conv1x1_16cx8_avx512)(
                    K, wp + (size_t)p * panel, npan, panel, b + q0, koff, npx, rows, c + co,
                    c_rs, res ? res + co : NULL, act);
            }
            q0 += npx;
        }
    }
#endif
}

/* Row means: mean[r] = (sum of the L floats at x + r*L) / L, for r in [0, rows). The sum runs
 * in 16 independent lanes (lane j adds the floats j, j+16, j+32, ...; written so that the
 * compiler can vectorise it without reassociating), then the lanes pairwise (8 adds, 4, 2,
 * 1), then the < 16 leftover floats in order: a fixed order on every ISA, so a fused mean
 * (mk_conv1x1_mean_f32) and this one over the stored output agree bit for bit. */
void mk_mean_rows_f32(const float *x, ptrdiff_t rows, ptrdiff_t L, float *mean) {
    const ptrdiff_t L16 = L / 16 * 16;
    const float inv = 1.0f / (float)L;
    for (ptrdiff_t r = 0; r < rows; r++) {
        const float *row = x + r * L;
        float acc[16] = {0};
        for (ptrdiff_t q = 0; q < L16; q += 16)
            for (int j = 0; j < 16; j++) acc[j] += row[q + j];
        for (int w = 8; w >= 1; w /= 2)
            for (int j = 0; j < w; j++) acc[j] += acc[j + w];
        float s = acc[0];
        for (ptrdiff_t q = L16; q < L; q++) s += row[q];
        mean[r] = s * inv;
    }
}

/* Whole convolution: x (N, K, HW) with image stride sn and channel stride sc (pixels
 * contiguous), packed panels (K -> M, float32), out (N, M, HW) C-contiguous, res the same or
 * NULL. koff: K entries of scratch. mean (N x M floats) or NULL: each output channel's mean
 * over its HW pixels (mk_mean_rows_f32), computed by the thread that wrote the channels while
 * they are still in its L1/L2 (a global average pool fused into the convolution). */
void mk_conv1x1_mean_f32(int N, int K, ptrdiff_t HW, const float *x, ptrdiff_t sn,
                         ptrdiff_t sc, int M, const float *wp, ptrdiff_t *koff, float *out,
                         const float *res, int act, float *mean, int nthreads) {
    for (int k = 0; k < K; k++) koff[k] = k * sc;
    const int npairs = (M + 2 * MK_CONV_MR - 1) / (2 * MK_CONV_MR);
    if (2.0 * N * (double)HW * M * K < 4e5) nthreads = 1;
    /* chunks of 4 panel pairs (the band's 64-channel groups, each of which reads the input
     * once), at least one per thread, claimed from a shared counter: a thread slowed by
     * another process hands its chunks over (tile-major within a chunk) */
    int nchunks = (npairs + 3) / 4;
    if (nchunks < nthreads) nchunks = nthreads < npairs ? nthreads : npairs;
    const int items = N * nchunks;
    if (nthreads > items) nthreads = items;
    MK_TEAM_FOR(nthreads, 1)
    for (int it = 0; it < items; it++) {
        const int n = it / nchunks, ch = it % nchunks;
        const int pp0 = npairs * ch / nchunks, pp1 = npairs * (ch + 1) / nchunks;
        float *o = out + (ptrdiff_t)n * M * HW;
        mk_conv1x1_band_f32((size_t)K, wp, M, x + n * sn, koff, HW, o, HW,
                            res ? res + (ptrdiff_t)n * M * HW : NULL, act, pp0, pp1);
        if (mean) {
            const int m0 = 2 * MK_CONV_MR * pp0;
            const int m1 = 2 * MK_CONV_MR * pp1 < M ? 2 * MK_CONV_MR * pp1 : M;
            mk_mean_rows_f32(o + (ptrdiff_t)m0 * HW, m1 - m0, HW, mean + (ptrdiff_t)n * M + m0);
        }
    }
    MK_TEAM_FOR_END
}

void mk_conv1x1_f32(int N, int K, ptrdiff_t HW, const float *x, ptrdiff_t sn, ptrdiff_t sc,
                    int M, const float *wp, ptrdiff_t *koff, float *out, const float *res,
                    int act, int nthreads) {
    mk_conv1x1_mean_f32(N, K, HW, x, sn, sc, M, wp, koff, out, res, act, NULL, nthreads);
}

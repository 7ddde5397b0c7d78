/* bfloat16-compute implicit GEMM tile on AMX (float32_matmul_precision "medium"): 32 output
 * channels x 32 output pixels, four 16x16 float32 accumulator tiles (C), two A tiles (16
 * channels x 32 k) and two B tiles (16 pair rows x 16 pixels x 2), tdpbf16ps per C tile for
 * each 32 k: the tile configuration of the GEMM engine's AMX tile (common/amx.h).
 *
 * A: the AMX pair panel of mk_bf16_conv_pack_panels (conv.h): bias[32] float32, then per
 * tap and 16 pair rows two A tiles of 16 rows x 64 bytes (channels 0-15, 16-31). B: pair rows
 * (conv.h), pair row p of tap t at b + tapoff[t] + p * ldb: B tile j is 16 pair rows at a
 * stride of ldb words from lane 16j (the bfloat16 pair image, or a packed tile). The
 * accumulators are stored once to a 4 KiB scratch; the epilogue (bias, residual,
 * activation, the masked segment stores) is the igemm tiles' own, mk_igemm_store_8xnv, eight
 * rows at a time, one tile behind the tile products (a call computes a block of tiles). The
 * caller loads the tile configuration in each thread before its first
 * call (mk_bf16_conv_amx_begin) and releases it after its last (mk_bf16_conv_amx_end); a tile
 * instruction on unconfigured tiles faults. Runs only once the OS granted this process the
 * tile state (isa.c). Chosen in conv-config.c. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include "common/amx.h"
#include "conv-simd.h"

#define MK_TAMX \
    __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

MK_TAMX void mk_bf16_conv_amx_begin(void) { _tile_loadconfig(&mk_amx_cfg_32x32); }

MK_TAMX void mk_bf16_conv_amx_end(void) { _tile_release(); }

/* Rows r0 .. r0 + 7 of one tile's epilogue from its float32 sums (32 rows of 32): bias, then
 * the igemm tiles' store (residual, activation, the segments). */
MK_TAMX static void amx_store8(const float *acc32, const float *bias, int r0, int mrows,
                               float *c, ptrdiff_t c_rs, const float *res, const mk_seg *segs,
                               int nseg, int act) {
    __m512 acc[8][3];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        const __m512 v = _mm512_set1_ps(bias[r0 + r]);
        acc[r][0] = _mm512_add_ps(v, _mm512_load_ps(acc32 + (r0 + r) * 32));
        acc[r][1] = _mm512_add_ps(v, _mm512_load_ps(acc32 + (r0 + r) * 32 + 16));
        acc[r][2] = acc[r][1];
    }
    mk_igemm_store_8xnv(2, acc, mrows - r0, c + r0 * c_rs, c_rs, res ? res + r0 * c_rs : NULL,
                        segs, nseg, act);
}

/* Prefetch the lines of rows r0 .. r1 - 1 of a tile's output (for writing) and residual
 * (segments segs[0 .. nseg)). The epilogue writes, and reads, 32 channel rows of 32 lanes a
 * plane apart: more streams than the hardware prefetchers follow, so without this each
 * residual line is a miss waited for (64 -> 64 3x3 at 56x56, batch 32, 2 threads: 16-18.6 ms
 * with the residual, 12.4-13 ms with the prefetch, 9.3-10 without a residual). Inlined: gcc
 * treats a function of prefetches alone as pure and deletes its calls. */
__attribute__((always_inline)) MK_TAMX static inline void
amx_prefetch_rows(const float *res, float *c, ptrdiff_t rs, int r0, int r1, const mk_seg *segs,
                  int nseg) {
    for (int r = r0; r < r1; r++)
        for (int s = 0; s < nseg; s++) {
            const ptrdiff_t o = r * rs + segs[s].off;
            const int lo = segs[s].lo, hi = segs[s].hi;
            for (int i = lo; i < hi + 15; i += 16) { /* every line, the last lane's too */
                const int k = i < hi ? i : hi - 1;
                _mm_prefetch((const char *)(c + o + k), _MM_HINT_ET0);
                if (res) _mm_prefetch((const char *)(res + o + k), _MM_HINT_T0);
            }
        }
}

/* The tiles of a block in a software pipeline: tile j - 1's epilogue, eight rows at a time,
 * between tile j's k blocks, so that the AVX-512 epilogue runs while the AMX unit works. */
MK_TAMX void mk_bf16_igemm_32x32__amx(size_t ntile, size_t bstep, size_t taps, size_t kpt,
                                      const ptrdiff_t *tapoff, size_t ldb, const uint32_t *a,
                                      const uint32_t *b, int mrows, float *c, ptrdiff_t c_rs,
                                      const float *res, const mk_seg (*segs)[MK_MAX_SEGS],
                                      const int *nseg, int act) {
    float acc32[2][32 * 32] __attribute__((aligned(64)));
    const float *bias = (const float *)a;
    const size_t stride = ldb * sizeof(uint32_t), nkb = kpt / 16;
    const int groups = (mrows + 7) / 8;
    const size_t steps = taps * nkb, every = steps / (size_t)(groups + 1) + 1;
    /* rows of tile j + 1's output and residual prefetched a k step while tile j computes
     * (tile j + 1's epilogue runs during tile j + 2) */
    const int pf_rows = (int)((mrows + steps - 1) / steps);
    for (size_t j = 0; j <= ntile; j++) {
        int g = 0; /* epilogue row groups of tile j - 1 done */
        const float *prev = acc32[(j + 1) & 1];
        if (j < ntile) {
            const unsigned char *w = (const unsigned char *)(a + 32);
            size_t step = 0;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (size_t t = 0; t < taps; t++) {
                const unsigned char *bt = (const unsigned char *)(b + j * bstep + tapoff[t]);
                for (size_t kb = 0; kb < nkb; kb++, step++) {
                    _tile_loadd(4, w, 64);
                    _tile_loadd(5, w + 1024, 64);
                    _tile_loadd(6, bt, stride);
                    _tile_loadd(7, bt + 64, stride);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                    w += 2048;
                    bt += 16 * stride;
                    if (j + 1 < ntile && (int)step * pf_rows < mrows) {
                        const int r0 = (int)step * pf_rows, r1 = r0 + pf_rows;
                        amx_prefetch_rows(res, c, c_rs, r0, r1 < mrows ? r1 : mrows, segs[j + 1],
                                          nseg[j + 1]);
                    }
                    if (j > 0 && g < groups && step % every == every - 1) {
                        amx_store8(prev, bias, 8 * g, mrows, c, c_rs, res, segs[j - 1],
                                   nseg[j - 1], act);
                        g++;
                    }
                }
            }
        }
        for (; j > 0 && g < groups; g++)
            amx_store8(prev, bias, 8 * g, mrows, c, c_rs, res, segs[j - 1], nseg[j - 1], act);
        if (j < ntile) {
            float *dst = acc32[j & 1];
            _tile_stored(0, dst, 128);
            _tile_stored(1, dst + 16, 128);
            _tile_stored(2, dst + 16 * 32, 128);
            _tile_stored(3, dst + 16 * 32 + 16, 128);
        }
    }
}

#endif /* MK_X86 */

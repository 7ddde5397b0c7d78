/* bfloat16-compute GEMM microkernel on AMX tiles, 32x32 block: four 16x16 float32
 * accumulator tiles (C), two A tiles (16 rows x 32 k) and two B tiles (16 pair rows x 16
 * columns x 2), tdpbf16ps per C tile for each 32 k. A: the tile micro-panels of
 * mk_bf16_pack_a_tiles__amx (rows of 64 bytes); W: the VNNI-pair panel of
 * mk_bf16_pack_w_pairs (a B tile is 16 pair rows of 64 bytes at a 128-byte stride); C, bias
 * and the epilogue float32 (the mk_gemm_ukernel contract of gemm.h).
 *
 * The tile configuration is loaded by mk_bf16_amx_begin (the configuration's begin hook),
 * which the driver calls in each thread before each run of kernel calls (mk_gemm_range; the
 * end hook, mk_bf16_amx_end, releases the tiles after it):
 * another library in the process (oneDNN, say) may configure this thread's tiles differently
 * between two of our GEMMs, but nothing else runs on the thread inside one run, and an
 * ldtilecfg per call cost 15-30% of a 32 x 32 x 384 call. The kernel must not be called
 * without it (a tile instruction on unconfigured tiles faults). The
 * accumulators start from the bias by a 0-stride tile load (every row the same 64 bytes).
 * Full 32x32 blocks are stored straight into C; partial ones go through a 4 KiB scratch.
 * Runs only once the OS granted this process the tile state (isa.c). Chosen in
 * gemm-config.c. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */
#include <immintrin.h>
#include <string.h>

#include "common/amx.h"
#include "gemm.h"

#ifndef MK_AMX_PF
#define MK_AMX_PF 4 /* k blocks of weight prefetch distance */
#endif

#define MK_TARGET_AMX \
    __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq")))

MK_TARGET_AMX void mk_bf16_amx_begin(void) { _tile_loadconfig(&mk_amx_cfg_32x32); }

MK_TARGET_AMX void mk_bf16_amx_end(void) { _tile_release(); }

MK_TARGET_AMX void mk_bf16_gemm_32x32__amx(size_t mr, size_t nc, size_t kc, const void *a_,
                                           const void *w_, void *c_, size_t ldc,
                                           const void *init_, const mk_epilogue *ep) {
    const unsigned char *a = (const unsigned char *)a_; /* in: tile micro-panel */
    const unsigned char *w = (const unsigned char *)w_; /* in: pair rows of 128 bytes */
    float *c = (float *)c_;                             /* in/out: mr x nc */
    float scratch[32 * 32] __attribute__((aligned(64)));
    const int full = mr == 32 && nc == 32;
    float *cb = full ? c : scratch;
    const size_t ldb = full ? ldc * sizeof(float) : 32 * sizeof(float); /* bytes */
    if (init_ != NULL) {
        const float *bias = (const float *)init_;
        _tile_loadd(0, bias, 0);
        _tile_loadd(1, bias + 16, 0);
        _tile_loadd(2, bias, 0);
        _tile_loadd(3, bias + 16, 0);
    } else {
        if (!full) {
            memset(scratch, 0, sizeof scratch);
            for (size_t i = 0; i < mr; i++) memcpy(scratch + i * 32, c + i * ldc, nc * sizeof(float));
        }
        _tile_loadd(0, cb, ldb);
        _tile_loadd(1, cb + 16, ldb);
        _tile_loadd(2, (const unsigned char *)cb + 16 * ldb, ldb);
        _tile_loadd(3, (const unsigned char *)cb + 16 * ldb + 64, ldb);
    }
    const size_t nkb = (kc + 31) / 32;
    for (size_t kb = 0; kb < nkb; kb++) {
        if (kb + MK_AMX_PF < nkb) {
            /* the weights MK_AMX_PF k blocks ahead (2 KiB each): with few rows they stream
             * from DRAM, and tile loads alone leave the hardware prefetchers behind */
#pragma GCC unroll 32
            for (int q = 0; q < 32; q++) _mm_prefetch((const char *)w + MK_AMX_PF * 2048 + q * 64, _MM_HINT_T0);
        }
        _tile_loadd(4, a, 64);
        _tile_loadd(5, a + 1024, 64);
        _tile_loadd(6, w, 128);
        _tile_loadd(7, w + 64, 128);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
        a += 2048;
        w += 2048;
    }
    _tile_stored(0, cb, ldb);
    _tile_stored(1, cb + 16, ldb);
    _tile_stored(2, (unsigned char *)cb + 16 * ldb, ldb);
    _tile_stored(3, (unsigned char *)cb + 16 * ldb + 64, ldb);
    const __mmask16 m0 = nc >= 16 ? 0xFFFF : (__mmask16)((1u << nc) - 1u);
    const __mmask16 m1 = nc >= 32 ? 0xFFFF : (nc <= 16 ? 0 : (__mmask16)((1u << (nc - 16)) - 1u));
    const int clamp = ep != NULL && (ep->act == MK_ACT_RELU || ep->act == MK_ACT_CLAMP);
    if (!full || clamp) {
        const __m512 lo = _mm512_set1_ps(clamp ? ep->lo32 : 0.0f);
        const __m512 hi = _mm512_set1_ps(clamp ? ep->hi32 : 0.0f);
        for (size_t i = 0; i < mr; i++) {
            const float *src = (const float *)((const unsigned char *)cb + i * ldb);
            __m512 v0 = _mm512_loadu_ps(src), v1 = _mm512_loadu_ps(src + 16);
            if (clamp) {
                v0 = _mm512_min_ps(hi, _mm512_max_ps(lo, v0));
                v1 = _mm512_min_ps(hi, _mm512_max_ps(lo, v1));
            }
            _mm512_mask_storeu_ps(c + i * ldc, m0, v0);
            _mm512_mask_storeu_ps(c + i * ldc + 16, m1, v1);
        }
    }
    if (ep != NULL && ep->act >= MK_ACT_GELU_ERF) mk_act_tile_f32_avx512(mr, nc, c, ldc, ep);
}

#endif /* MK_X86 */

/* qd8-f32-qc8w GEMM tile on AMX-INT8: up to 32 rows x one 32-column panel (qgemm.h).
 *
 * Four 16x16 int32 accumulator tiles (C), two A tiles (16 quantized rows x 64 k, read in place
 * from the rows of quantized activations at their stride) and two B tiles (16 groups of 4 k x
 * 16 columns, read from the panel's [KP/4][32][4] bytes at a 128-byte stride), tdpbusd (u8 x s8)
 * per C tile for each 64 k. KP is a multiple of 64 for this configuration (the padding k are 0
 * in the weights and 128, i.e. zero, in the activations), and the driver pads the quantized
 * rows to a multiple of 32 (rows of 128), so every tile load reads memory it owns. The integer
 * sums are the VNNI tile's; the epilogue is its too (qgemm-epilogue-avx512.h), so the two
 * kernels agree bit for bit.
 *
 * The tile configuration is loaded by mk_qd8_amx_begin, which the driver calls in each thread
 * before its run of tiles (mk_qd8_amx_end releases the tiles after it): the kernel must not run
 * without it. Runs only once the OS granted the process the tile state (isa.c), chosen in
 * qgemm-config.c. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */
#include <immintrin.h>

#include "common/amx.h"
#include "qgemm.h"
#include "qgemm-epilogue-avx512.h"

#define NR 32

#define TARGET __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

TARGET void mk_qd8_amx_begin(void) { _tile_loadconfig(&mk_amx_cfg_32x32); }

TARGET void mk_qd8_amx_end(void) { _tile_release(); }

TARGET void mk_qd8_f32_qc8w_gemm_32x32__amx(size_t rows, size_t nc, size_t kp, const uint8_t *a,
                                            size_t lda, const float *ascale, const void *panel,
                                            void *c, size_t ldc, const uint8_t *res,
                                            const mk_qgemm_epilogue *ep) {
    const int8_t *w = (const int8_t *)panel + NR * 12;
    int32_t acc[32 * 32] __attribute__((aligned(64)));
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (size_t kb = 0; kb < kp / 64; kb++) {
        _tile_loadd(4, a + kb * 64, lda);
        _tile_loadd(5, a + 16 * lda + kb * 64, lda);
        _tile_loadd(6, w + kb * 16 * 4 * NR, 4 * NR);
        _tile_loadd(7, w + kb * 16 * 4 * NR + 64, 4 * NR);
        _tile_dpbusd(0, 4, 6);
        _tile_dpbusd(1, 4, 7);
        _tile_dpbusd(2, 5, 6);
        _tile_dpbusd(3, 5, 7);
    }
    _tile_stored(0, acc, 32 * sizeof(int32_t));
    _tile_stored(1, acc + 16, 32 * sizeof(int32_t));
    _tile_stored(2, acc + 16 * 32, 32 * sizeof(int32_t));
    _tile_stored(3, acc + 16 * 32 + 16, 32 * sizeof(int32_t));
    const mk_qepi_panel pc = mk_qepi_load(panel, NR, nc, ascale, ep);
    const size_t width = ep->out_u8 ? 1 : sizeof(float);
    for (size_t r = 0; r < rows && r < 32; r++)
        mk_qepi_row(_mm512_load_si512((const void *)(acc + r * 32)),
                    _mm512_load_si512((const void *)(acc + r * 32 + 16)),
                    ascale[r * ep->ascale_step], &pc, res != NULL ? res + r * ep->ldr : NULL,
                    (char *)c + r * ldc * width, ep);
}
#endif /* MK_X86 */

/* AMX attention blocks (float32_matmul_precision "medium" on the AMX path): the two products
 * of ops-attention.c, S = Q_h (scale K_h^T) and O = P V_h, in 32x32 blocks of four 16x16
 * float32 accumulator tiles (common/amx.h's configuration: tiles 0-3 C, 4-5 A, 6-7 B), each
 * tdpbf16ps taking 16 pairs (32 k). The operands are the bfloat16 pair words of
 * bf16-attention-8x32-avx512bf16.c (mk_attention_bf16_rows / _pairs), in buffers the driver
 * pads with zeros to whole tiles: A to a multiple of 32 rows and of 16 words a row, B to a
 * multiple of 16 pair rows and of 32 columns, so every tile load stays inside them and the
 * padding adds zeros. Full 16x16 blocks of C are stored in place, partial ones through a
 * scratch tile. The driver loads the tile configuration once per thread before its tasks
 * (mk_attention_amx_begin) and releases the tiles after them (mk_attention_amx_end); a tile
 * instruction on unconfigured tiles faults. Runs only once the OS granted the tile state. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */
#include <immintrin.h>
#include <string.h>

#include "common/amx.h"
#include "ops.h"

#define MK_TARGET_AMX \
    __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq")))

MK_TARGET_AMX void mk_attention_amx_begin(void) { _tile_loadconfig(&mk_amx_cfg_32x32); }

MK_TARGET_AMX void mk_attention_amx_end(void) { _tile_release(); }

/* the valid rows x cols corner of a 16x16 float32 block (64-byte rows) into c */
static void store_part(const float *blk, size_t rows, size_t cols, float *c, ptrdiff_t csr) {
    for (size_t i = 0; i < rows; i++) memcpy(c + (ptrdiff_t)i * csr, blk + i * 16, cols * 4);
}

#define MK_STORE_TILE(T, R0, C0)                                                          \
    do {                                                                                  \
        const size_t r0_ = (R0), c0_ = (C0);                                              \
        if (r0_ < rows && c0_ < cols) {                                                   \
            if (r0_ + 16 <= rows && c0_ + 16 <= cols) {                                   \
                _tile_stored(T, c + (ptrdiff_t)r0_ * csr + (ptrdiff_t)c0_, csr * 4);      \
            } else {                                                                      \
                _tile_stored(T, scratch, 64);                                             \
                store_part(scratch, rows - r0_ < 16 ? rows - r0_ : 16,                    \
                           cols - c0_ < 16 ? cols - c0_ : 16, c + (ptrdiff_t)r0_ * csr + \
                           (ptrdiff_t)c0_, csr);                                          \
            }                                                                             \
        }                                                                                 \
    } while (0)

/* C[rows x cols] = A B over np pairs (np a multiple of 16): A rows lda words apart, B pair
 * rows ldb words apart, both padded as the file comment says */
MK_TARGET_AMX void mk_attention_dot_bf16_amx(size_t rows, size_t cols, size_t np,
                                             const uint32_t *a, size_t lda, const uint32_t *b,
                                             size_t ldb, float *c, ptrdiff_t csr) {
    float scratch[16 * 16] __attribute__((aligned(64)));
    const size_t sa = lda * 4, sb = ldb * 4; /* bytes */
    const int one_step = np == 16; /* head dims up to 32: the A tiles stay for every j */
    for (size_t i = 0; i < rows; i += 32) {
        const uint32_t *a0 = a + i * lda, *a1 = a0 + 16 * lda;
        if (one_step) {
            _tile_loadd(4, a0, sa);
            _tile_loadd(5, a1, sa);
        }
        for (size_t j = 0; j < cols; j += 32) {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (size_t p = 0; p < np; p += 16) {
                if (!one_step) {
                    _tile_loadd(4, a0 + p, sa);
                    _tile_loadd(5, a1 + p, sa);
                }
                _tile_loadd(6, b + p * ldb + j, sb);
                _tile_loadd(7, b + p * ldb + j + 16, sb);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            MK_STORE_TILE(0, i, j);
            MK_STORE_TILE(1, i, j + 16);
            MK_STORE_TILE(2, i + 16, j);
            MK_STORE_TILE(3, i + 16, j + 16);
        }
    }
}

#endif /* MK_X86 */

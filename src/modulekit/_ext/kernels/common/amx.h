/* The AMX tile configuration the bfloat16 and int8 GEMM tiles share (gemm/bf16-gemm-32x32-amx.c,
 * qgemm/qd8-f32-qc8w-gemm-32x32-amx.c): palette 1, eight tiles of 16 rows x 64 bytes, used as
 * tiles 0-3: the 32x32 block of accumulators (rows 0-15 / 16-31 x columns 0-15 / 16-31),
 * 4-5: two A tiles, 6-7: two B tiles. A kernel's begin hook loads it (_tile_loadconfig) in
 * each thread before its run of tile calls; its end hook releases the tiles. */
#ifndef MK_COMMON_AMX_H
#define MK_COMMON_AMX_H

#include <stdint.h>

typedef struct __attribute__((aligned(64))) {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} mk_amx_tilecfg;

static const mk_amx_tilecfg mk_amx_cfg_32x32 = {
    1, 0, {0},
    {64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0},
    {16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0},
};

#endif /* MK_COMMON_AMX_H */

/* The GEMM configuration table: for each (ISA level, weight storage) the microkernels, the
 * activation packing routine that feeds them, the register block MR x NR (which fixes the
 * packed weight layout written by mk_gemm_pack), the cache blocks KC, MC, NC and the
 * tile-activation routine. This is the ONLY place where these are chosen.
 *
 * Cache blocking: the KC x NR weight micro-panel stays in L1 while the MR-row activation
 * micro-panels of the MC x KC block stream from L2; NC bounds the KC x NC weight block a
 * thread sweeps per A block. The MC values below are the reference machine's (1 MiB L2);
 * mk_gemm_mc scales them to the CPU's L2. The machine measured (sysfs / cpuid): AMD EPYC
 * family 26 (Zen 5), L1d 48 KiB, L2 1 MiB per core, L3 32 MiB; its AVX-512 FMAs run at full 512-bit
 * rate (OpenBLAS's SkylakeX kernel reaches ~215 GFLOP/s on one core, AVX2 kernels about
 * half). f32 AVX-512, one thread, 1024^3 and 2048^3: 8x32 with KC=384 (a 48 KiB micro-panel)
 * and MC=96 reached 200-219 GFLOP/s; KC 128-256 lost 5-15% (more C reloads); 12x32 was no
 * faster; 14x16 (one zmm per row, a broadcast per FMA) ran at 85. The AVX2 and f64 blocks
 * follow the same rules (micro-panel 24-32 KiB), not tuned separately.
 * The small-M ("direct") kernels serve M = 1..8 rows without packing A (the 1-row kernel
 * takes two panels per call); NULL entries fall back to the main kernel. */
#include <stddef.h>

#include "gemm.h"
#include "common/caches.h"

void mk_f32_bf16w_gemm_1x16d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_bf16w_gemm_1x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_bf16w_gemm_2x16d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_bf16w_gemm_2x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_bf16w_gemm_3x16d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_bf16w_gemm_3x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_bf16w_gemm_4x16d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_bf16w_gemm_4x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_bf16w_gemm_4x8__scalar(size_t, size_t, size_t, const void *, const void *, void *, size_t, const void *, const mk_epilogue *);
void mk_f32_bf16w_gemm_5x16d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_bf16w_gemm_5x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_bf16w_gemm_6x16__avx2(size_t, size_t, size_t, const void *, const void *, void *, size_t, const void *, const mk_epilogue *);
void mk_f32_bf16w_gemm_6x16d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_bf16w_gemm_6x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_bf16w_gemm_7x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_bf16w_gemm_8x32__avx512(size_t, size_t, size_t, const void *, const void *, void *, size_t, const void *, const mk_epilogue *);
void mk_f32_bf16w_gemm_8x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_f16w_gemm_1x16d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_f16w_gemm_1x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_f16w_gemm_2x16d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_f16w_gemm_2x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_f16w_gemm_3x16d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_f16w_gemm_3x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_f16w_gemm_4x16d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_f16w_gemm_4x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_f16w_gemm_4x8__scalar(size_t, size_t, size_t, const void *, const void *, void *, size_t, const void *, const mk_epilogue *);
void mk_f32_f16w_gemm_5x16d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_f16w_gemm_5x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_f16w_gemm_6x16__avx2(size_t, size_t, size_t, const void *, const void *, void *, size_t, const void *, const mk_epilogue *);
void mk_f32_f16w_gemm_6x16d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_f16w_gemm_6x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_f16w_gemm_7x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_f16w_gemm_8x32__avx512(size_t, size_t, size_t, const void *, const void *, void *, size_t, const void *, const mk_epilogue *);
void mk_f32_f16w_gemm_8x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_gemm_1x16d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_gemm_1x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_gemm_2x16d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_gemm_2x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_gemm_3x16d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_gemm_3x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_gemm_4x16d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_gemm_4x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_gemm_4x8__scalar(size_t, size_t, size_t, const void *, const void *, void *, size_t, const void *, const mk_epilogue *);
void mk_f32_gemm_5x16d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_gemm_5x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_gemm_6x16__avx2(size_t, size_t, size_t, const void *, const void *, void *, size_t, const void *, const mk_epilogue *);
void mk_f32_gemm_6x16d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_gemm_6x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_gemm_7x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f32_gemm_8x32__avx512(size_t, size_t, size_t, const void *, const void *, void *, size_t, const void *, const mk_epilogue *);
void mk_f32_gemm_8x32d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f64_gemm_1x16d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f64_gemm_1x8d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f64_gemm_2x16d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f64_gemm_2x8d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f64_gemm_3x16d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f64_gemm_3x8d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f64_gemm_4x16d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f64_gemm_4x4__scalar(size_t, size_t, size_t, const void *, const void *, void *, size_t, const void *, const mk_epilogue *);
void mk_f64_gemm_4x8d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f64_gemm_5x16d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f64_gemm_5x8d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f64_gemm_6x16d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f64_gemm_6x8__avx2(size_t, size_t, size_t, const void *, const void *, void *, size_t, const void *, const mk_epilogue *);
void mk_f64_gemm_6x8d__avx2(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f64_gemm_7x16d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);
void mk_f64_gemm_8x16__avx512(size_t, size_t, size_t, const void *, const void *, void *, size_t, const void *, const mk_epilogue *);
void mk_f64_gemm_8x16d__avx512(size_t, size_t, const void *, ptrdiff_t, const void *, size_t, void *, size_t, const mk_epilogue *, const void *, size_t);

static const mk_gemm_config mk_gemm_configs[MK_ISA_COUNT][MK_STORAGE_COUNT] = {
    [MK_ISA_GENERIC][MK_STORAGE_F32] = {
        .name = "f32-gemm-4x8-scalar", .isa = MK_ISA_GENERIC, .compute = MK_COMPUTE_F32, .storage = MK_STORAGE_F32,
        .mr = 4, .nr = 8, .kc = 256, .mc = 64, .nc = 1024, .esize = 4, .wsize = 4,
        .ukernel = mk_f32_gemm_4x8__scalar,
        .pack_a = mk_gemm_pack_a_f32,
        .smallm = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
        .act_tile = mk_act_tile_f32_scalar,
    },
    [MK_ISA_GENERIC][MK_STORAGE_F16] = {
        .name = "f32-f16w-gemm-4x8-scalar", .isa = MK_ISA_GENERIC, .compute = MK_COMPUTE_F32, .storage = MK_STORAGE_F16,
        .mr = 4, .nr = 8, .kc = 256, .mc = 64, .nc = 1024, .esize = 4, .wsize = 2,
        .ukernel = mk_f32_f16w_gemm_4x8__scalar,
        .pack_a = mk_gemm_pack_a_f32,
        .smallm = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
        .act_tile = mk_act_tile_f32_scalar,
    },
    [MK_ISA_GENERIC][MK_STORAGE_BF16] = {
        .name = "f32-bf16w-gemm-4x8-scalar", .isa = MK_ISA_GENERIC, .compute = MK_COMPUTE_F32, .storage = MK_STORAGE_BF16,
        .mr = 4, .nr = 8, .kc = 256, .mc = 64, .nc = 1024, .esize = 4, .wsize = 2,
        .ukernel = mk_f32_bf16w_gemm_4x8__scalar,
        .pack_a = mk_gemm_pack_a_f32,
        .smallm = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
        .act_tile = mk_act_tile_f32_scalar,
    },
    [MK_ISA_GENERIC][MK_STORAGE_F64] = {
        .name = "f64-gemm-4x4-scalar", .isa = MK_ISA_GENERIC, .compute = MK_COMPUTE_F64, .storage = MK_STORAGE_F64,
        .mr = 4, .nr = 4, .kc = 256, .mc = 64, .nc = 1024, .esize = 8, .wsize = 8,
        .ukernel = mk_f64_gemm_4x4__scalar,
        .pack_a = mk_gemm_pack_a_f64,
        .smallm = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
        .act_tile = mk_act_tile_f64_scalar,
    },
#if MK_X86 /* elsewhere the SIMD levels hold nothing: mk_gemm_get_config returns NULL */
    [MK_ISA_AVX2][MK_STORAGE_F32] = {
        .name = "f32-gemm-6x16-avx2", .isa = MK_ISA_AVX2, .compute = MK_COMPUTE_F32, .storage = MK_STORAGE_F32,
        .mr = 6, .nr = 16, .kc = 384, .mc = 96, .nc = 4096, .esize = 4, .wsize = 4,
        .ukernel = mk_f32_gemm_6x16__avx2,
        .pack_a = mk_gemm_pack_a_f32,
        .smallm = {NULL, mk_f32_gemm_1x16d__avx2, mk_f32_gemm_2x16d__avx2, mk_f32_gemm_3x16d__avx2, mk_f32_gemm_4x16d__avx2, mk_f32_gemm_5x16d__avx2, mk_f32_gemm_6x16d__avx2, NULL, NULL},
        .smallm_np = {0, 2, 1, 1, 1, 1, 1, 1, 1},
        .act_tile = mk_act_tile_f32_avx2,
    },
    [MK_ISA_AVX2][MK_STORAGE_F16] = {
        .name = "f32-f16w-gemm-6x16-avx2", .isa = MK_ISA_AVX2, .compute = MK_COMPUTE_F32, .storage = MK_STORAGE_F16,
        .mr = 6, .nr = 16, .kc = 384, .mc = 96, .nc = 4096, .esize = 4, .wsize = 2,
        .ukernel = mk_f32_f16w_gemm_6x16__avx2,
        .pack_a = mk_gemm_pack_a_f32,
        .smallm = {NULL, mk_f32_f16w_gemm_1x16d__avx2, mk_f32_f16w_gemm_2x16d__avx2, mk_f32_f16w_gemm_3x16d__avx2, mk_f32_f16w_gemm_4x16d__avx2, mk_f32_f16w_gemm_5x16d__avx2, mk_f32_f16w_gemm_6x16d__avx2, NULL, NULL},
        .smallm_np = {0, 2, 1, 1, 1, 1, 1, 1, 1},
        .act_tile = mk_act_tile_f32_avx2,
    },
    [MK_ISA_AVX2][MK_STORAGE_BF16] = {
        .name = "f32-bf16w-gemm-6x16-avx2", .isa = MK_ISA_AVX2, .compute = MK_COMPUTE_F32, .storage = MK_STORAGE_BF16,
        .mr = 6, .nr = 16, .kc = 384, .mc = 96, .nc = 4096, .esize = 4, .wsize = 2,
        .ukernel = mk_f32_bf16w_gemm_6x16__avx2,
        .pack_a = mk_gemm_pack_a_f32,
        .smallm = {NULL, mk_f32_bf16w_gemm_1x16d__avx2, mk_f32_bf16w_gemm_2x16d__avx2, mk_f32_bf16w_gemm_3x16d__avx2, mk_f32_bf16w_gemm_4x16d__avx2, mk_f32_bf16w_gemm_5x16d__avx2, mk_f32_bf16w_gemm_6x16d__avx2, NULL, NULL},
        .smallm_np = {0, 2, 1, 1, 1, 1, 1, 1, 1},
        .act_tile = mk_act_tile_f32_avx2,
    },
    [MK_ISA_AVX2][MK_STORAGE_F64] = {
        .name = "f64-gemm-6x8-avx2", .isa = MK_ISA_AVX2, .compute = MK_COMPUTE_F64, .storage = MK_STORAGE_F64,
        .mr = 6, .nr = 8, .kc = 384, .mc = 96, .nc = 2048, .esize = 8, .wsize = 8,
        .ukernel = mk_f64_gemm_6x8__avx2,
        .pack_a = mk_gemm_pack_a_f64,
        .smallm = {NULL, mk_f64_gemm_1x8d__avx2, mk_f64_gemm_2x8d__avx2, mk_f64_gemm_3x8d__avx2, mk_f64_gemm_4x8d__avx2, mk_f64_gemm_5x8d__avx2, mk_f64_gemm_6x8d__avx2, NULL, NULL},
        .smallm_np = {0, 2, 1, 1, 1, 1, 1, 1, 1},
        .act_tile = mk_act_tile_f64_scalar,
    },
    [MK_ISA_AVX512][MK_STORAGE_F32] = {
        .name = "f32-gemm-8x32-avx512", .isa = MK_ISA_AVX512, .compute = MK_COMPUTE_F32, .storage = MK_STORAGE_F32,
        .mr = 8, .nr = 32, .kc = 384, .mc = 96, .nc = 4096, .esize = 4, .wsize = 4,
        .ukernel = mk_f32_gemm_8x32__avx512,
        .pack_a = mk_gemm_pack_a_f32,
        .smallm = {NULL, mk_f32_gemm_1x32d__avx512, mk_f32_gemm_2x32d__avx512, mk_f32_gemm_3x32d__avx512, mk_f32_gemm_4x32d__avx512, mk_f32_gemm_5x32d__avx512, mk_f32_gemm_6x32d__avx512, mk_f32_gemm_7x32d__avx512, mk_f32_gemm_8x32d__avx512},
        .smallm_np = {0, 2, 1, 1, 1, 1, 1, 1, 1},
        .act_tile = mk_act_tile_f32_avx512,
    },
    [MK_ISA_AVX512][MK_STORAGE_F16] = {
        .name = "f32-f16w-gemm-8x32-avx512", .isa = MK_ISA_AVX512, .compute = MK_COMPUTE_F32, .storage = MK_STORAGE_F16,
        .mr = 8, .nr = 32, .kc = 384, .mc = 96, .nc = 4096, .esize = 4, .wsize = 2,
        .ukernel = mk_f32_f16w_gemm_8x32__avx512,
        .pack_a = mk_gemm_pack_a_f32,
        .smallm = {NULL, mk_f32_f16w_gemm_1x32d__avx512, mk_f32_f16w_gemm_2x32d__avx512, mk_f32_f16w_gemm_3x32d__avx512, mk_f32_f16w_gemm_4x32d__avx512, mk_f32_f16w_gemm_5x32d__avx512, mk_f32_f16w_gemm_6x32d__avx512, mk_f32_f16w_gemm_7x32d__avx512, mk_f32_f16w_gemm_8x32d__avx512},
        .smallm_np = {0, 2, 1, 1, 1, 1, 1, 1, 1},
        .act_tile = mk_act_tile_f32_avx512,
    },
    [MK_ISA_AVX512][MK_STORAGE_BF16] = {
        .name = "f32-bf16w-gemm-8x32-avx512", .isa = MK_ISA_AVX512, .compute = MK_COMPUTE_F32, .storage = MK_STORAGE_BF16,
        .mr = 8, .nr = 32, .kc = 384, .mc = 96, .nc = 4096, .esize = 4, .wsize = 2,
        .ukernel = mk_f32_bf16w_gemm_8x32__avx512,
        .pack_a = mk_gemm_pack_a_f32,
        .smallm = {NULL, mk_f32_bf16w_gemm_1x32d__avx512, mk_f32_bf16w_gemm_2x32d__avx512, mk_f32_bf16w_gemm_3x32d__avx512, mk_f32_bf16w_gemm_4x32d__avx512, mk_f32_bf16w_gemm_5x32d__avx512, mk_f32_bf16w_gemm_6x32d__avx512, mk_f32_bf16w_gemm_7x32d__avx512, mk_f32_bf16w_gemm_8x32d__avx512},
        .smallm_np = {0, 2, 1, 1, 1, 1, 1, 1, 1},
        .act_tile = mk_act_tile_f32_avx512,
    },
    [MK_ISA_AVX512][MK_STORAGE_F64] = {
        .name = "f64-gemm-8x16-avx512", .isa = MK_ISA_AVX512, .compute = MK_COMPUTE_F64, .storage = MK_STORAGE_F64,
        .mr = 8, .nr = 16, .kc = 256, .mc = 96, .nc = 2048, .esize = 8, .wsize = 8,
        .ukernel = mk_f64_gemm_8x16__avx512,
        .pack_a = mk_gemm_pack_a_f64,
        .smallm = {NULL, mk_f64_gemm_1x16d__avx512, mk_f64_gemm_2x16d__avx512, mk_f64_gemm_3x16d__avx512, mk_f64_gemm_4x16d__avx512, mk_f64_gemm_5x16d__avx512, mk_f64_gemm_6x16d__avx512, mk_f64_gemm_7x16d__avx512, mk_f64_gemm_8x16d__avx512},
        .smallm_np = {0, 2, 1, 1, 1, 1, 1, 1, 1},
        .act_tile = mk_act_tile_f64_scalar,
    },
#endif
};

/* MC for this CPU: the table's, measured with a 1 MiB L2 (Zen 5), scaled to this CPU's L2
 * (common/caches.h) in MR multiples, so that the MC x KC activation block keeps its share of
 * L2 (the Xeons' 2 MiB: 192 rows for the f32 AVX-512 8x32 kernel; measured there against 96:
 * matmul 1024^3 and 2048^3 within 3% either way, 2 threads). The AMX entry (begin set) keeps
 * its MC: its block was measured on the AMX Xeon itself. */
size_t mk_gemm_mc(const mk_gemm_config *cfg) {
    if (cfg->begin != NULL) return cfg->mc;
    const size_t mc = mk_l2_scaled(cfg->mc) / cfg->mr * cfg->mr;
    return mc < cfg->mr ? cfg->mr : mc;
}

const mk_gemm_config *mk_gemm_get_config(int compute, int storage, int isa) {
    if (isa < 0 || isa >= MK_ISA_COUNT || storage < 0 || storage >= MK_STORAGE_COUNT) return NULL;
    const mk_gemm_config *cfg = &mk_gemm_configs[isa][storage];
    return cfg->compute == compute && cfg->ukernel != NULL ? cfg : NULL;
}

/* ---- bfloat16 compute (set_float32_matmul_precision("medium"), bfloat16 weights under it):
 * one entry per bf16 path, indexed by mk_bf16_isa. Both share one packed weight layout
 * (NR = 32, VNNI pairs, K padded to 32: kpad, pack_w), so switching path needs no re-pack;
 * each packs the activations for its kernel while rounding them to bfloat16 (asize = 2).
 * No small-M kernels: every row count packs its activations (they must be rounded anyway).
 * AMX: a 32x32 block of four accumulator tiles, KC = 4096 (the whole K of the layers in
 * reach: the accumulators stay in tiles for all of K, no C reload), MC = 128, NC = 8192 (each
 * thread rounds its rows once). Measured on the 2-core Xeon (AMX-BF16, shared/loaded), one
 * thread, CPU time: KC 512/1024/4096 x MC 64/128/256 x NC 1024-8192 all within the noise
 * (+-15%) of each other on 1024^3, 64x4096x4096 and 256x384x1536 once the weights are
 * prefetched (+25-50% for the weight-streaming shape) and the tile configuration is loaded
 * once per run (begin: +10-60% on K = 384). AVX512-BF16: 8x32, KC = 512 (a 32 KiB weight
 * micro-panel in L1). */
void mk_bf16_gemm_8x32__avx512bf16(size_t, size_t, size_t, const void *, const void *, void *, size_t, const void *, const mk_epilogue *);
void mk_bf16_gemm_32x32__amx(size_t, size_t, size_t, const void *, const void *, void *, size_t, const void *, const mk_epilogue *);
void mk_bf16_pack_a_pairs__avx512bf16(size_t, size_t, size_t, const void *, ptrdiff_t, ptrdiff_t, void *);
void mk_bf16_pack_a_tiles__amx(size_t, size_t, size_t, const void *, ptrdiff_t, ptrdiff_t, void *);
void mk_bf16_amx_begin(void);
void mk_bf16_amx_end(void);
void mk_bf16_pack_w_pairs(size_t, size_t, size_t, const void *, ptrdiff_t, ptrdiff_t, void *);

static const mk_gemm_config mk_gemm_bf16_configs[MK_BF16_COUNT] = {
#if MK_X86
    [MK_BF16_AVX512BF16] = {
        .name = "bf16-gemm-8x32-avx512bf16", .isa = MK_ISA_AVX512, .compute = MK_COMPUTE_F32, .storage = MK_STORAGE_BF16,
        .mr = 8, .nr = 32, .kc = 512, .mc = 96, .nc = 8192, .esize = 4, .wsize = 2,
        .ukernel = mk_bf16_gemm_8x32__avx512bf16,
        .pack_a = mk_bf16_pack_a_pairs__avx512bf16,
        .act_tile = mk_act_tile_f32_avx512,
        .kpad = 32, .asize = 2, .pack_w = mk_bf16_pack_w_pairs,
    },
    [MK_BF16_AMX] = {
        .name = "bf16-gemm-32x32-amx", .isa = MK_ISA_AVX512, .compute = MK_COMPUTE_F32, .storage = MK_STORAGE_BF16,
        .mr = 32, .nr = 32, .kc = 4096, .mc = 128, .nc = 8192, .esize = 4, .wsize = 2,
        .ukernel = mk_bf16_gemm_32x32__amx,
        .pack_a = mk_bf16_pack_a_tiles__amx,
        .act_tile = mk_act_tile_f32_avx512,
        .kpad = 32, .asize = 2, .pack_w = mk_bf16_pack_w_pairs,
        .begin = mk_bf16_amx_begin, .end = mk_bf16_amx_end,
    },
#endif
};

const mk_gemm_config *mk_gemm_get_bf16_config(int bf16_isa) {
    if (bf16_isa <= MK_BF16_NONE || bf16_isa >= MK_BF16_COUNT) return NULL;
    const mk_gemm_config *cfg = &mk_gemm_bf16_configs[bf16_isa];
    return cfg->ukernel != NULL ? cfg : NULL;
}

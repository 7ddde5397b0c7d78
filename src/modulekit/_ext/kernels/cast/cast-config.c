/* The one place that picks the conversion kernels: for every (source type, destination
 * type) the micro-kernel of each instruction-set level, plus the size threshold of the
 * driver's parallel path. */
#include "cast.h"

/* Below this much work (bytes read + bytes written) a cast runs on the calling thread.
 * Measured with `python bench/casts.py --threshold` (float32 -> float16, 2-core Zen 4, two
 * runs): 2 threads were slower up to 512 KiB of work (3.75 us serial vs 4.06 us; waking the
 * thread pool costs 1-15 us) and faster from 1 MiB (10.2 us vs 7.9 us; 4 MiB: 2.0x). */
#define MK_CAST_PARALLEL_MIN_BYTES ((size_t)1 << 20)

/* From this much work a cast that does not alias streams its output past the caches
 * (non-temporal stores): more than this machine's L3 (32 MiB), so the output would not
 * have stayed cached anyway, and the stores skip reading every output line first. */
#define MK_CAST_STREAM_MIN_BYTES ((size_t)32 << 20)

typedef struct {
    mk_vcvt_ukernel_fn ukernel[MK_ISA_COUNT]; /* indexed by mk_isa: generic, avx2, avx512 */
} mk_vcvt_config;

/* One row: the generic, AVX2-level and AVX-512 kernels (generic at every level off x86). */
#if MK_CAST_X86
#define MK_ROW(generic, avx2, avx512) {{generic, avx2, avx512}}
#else
#define MK_ROW(generic, avx2, avx512) {{generic, generic, generic}}
#endif
#define MK_SAME(fn) {{fn, fn, fn}}

static const mk_vcvt_config mk_cast_config[MK_DT_COUNT][MK_DT_COUNT] = {
    [MK_DT_F32] = {
        [MK_DT_F32] = MK_SAME(mk_x32_copy_ukernel__memcpy),
        [MK_DT_F64] = MK_ROW(mk_f32_f64_vcvt_ukernel__scalar_x1,
                      mk_f32_f64_vcvt_ukernel__avx2_x4,
                      mk_f32_f64_vcvt_ukernel__avx512_x8),
        [MK_DT_F16] = MK_ROW(mk_f32_f16_vcvt_ukernel__scalar_x1,
                      mk_f32_f16_vcvt_ukernel__f16c_x8,
                      mk_f32_f16_vcvt_ukernel__avx512_x16),
        [MK_DT_BF16] = MK_ROW(mk_f32_bf16_vcvt_ukernel__scalar_x1,
                      mk_f32_bf16_vcvt_ukernel__avx2_x8,
                      mk_f32_bf16_vcvt_ukernel__avx512_x32),
    },
    [MK_DT_F64] = {
        [MK_DT_F32] = MK_ROW(mk_f64_f32_vcvt_ukernel__scalar_x1,
                      mk_f64_f32_vcvt_ukernel__avx2_x4,
                      mk_f64_f32_vcvt_ukernel__avx512_x8),
        [MK_DT_F64] = MK_SAME(mk_x64_copy_ukernel__memcpy),
        [MK_DT_F16] = MK_ROW(mk_f64_f16_vcvt_ukernel__scalar_x1,
                      mk_f64_f16_vcvt_ukernel__f16c_x4,
                      mk_f64_f16_vcvt_ukernel__avx512_x8),
        [MK_DT_BF16] = MK_ROW(mk_f64_bf16_vcvt_ukernel__scalar_x1,
                      mk_f64_bf16_vcvt_ukernel__avx2_x4,
                      mk_f64_bf16_vcvt_ukernel__avx512_x8),
    },
    [MK_DT_F16] = {
        [MK_DT_F32] = MK_ROW(mk_f16_f32_vcvt_ukernel__scalar_x1,
                      mk_f16_f32_vcvt_ukernel__f16c_x8,
                      mk_f16_f32_vcvt_ukernel__avx512_x16),
        [MK_DT_F64] = MK_ROW(mk_f16_f64_vcvt_ukernel__scalar_x1,
                      mk_f16_f64_vcvt_ukernel__f16c_x8,
                      mk_f16_f64_vcvt_ukernel__avx512_x8),
        [MK_DT_F16] = MK_SAME(mk_x16_copy_ukernel__memcpy),
        [MK_DT_BF16] = MK_ROW(mk_f16_bf16_vcvt_ukernel__scalar_x1,
                      mk_f16_bf16_vcvt_ukernel__f16c_x8,
                      mk_f16_bf16_vcvt_ukernel__avx512_x16),
    },
    [MK_DT_BF16] = {
        [MK_DT_F32] = MK_ROW(mk_bf16_f32_vcvt_ukernel__scalar_x1,
                      mk_bf16_f32_vcvt_ukernel__avx2_x8,
                      mk_bf16_f32_vcvt_ukernel__avx512_x16),
        [MK_DT_F64] = MK_ROW(mk_bf16_f64_vcvt_ukernel__scalar_x1,
                      mk_bf16_f64_vcvt_ukernel__avx2_x8,
                      mk_bf16_f64_vcvt_ukernel__avx512_x8),
        [MK_DT_F16] = MK_ROW(mk_bf16_f16_vcvt_ukernel__scalar_x1,
                      mk_bf16_f16_vcvt_ukernel__f16c_x8,
                      mk_bf16_f16_vcvt_ukernel__avx512_x16),
        [MK_DT_BF16] = MK_SAME(mk_x16_copy_ukernel__memcpy),
    },
};

/* Non-temporal variants, where a pair has them (the float32 <-> 16-bit weight casts). */
#if MK_CAST_X86
static const mk_vcvt_config mk_cast_stream_config[MK_DT_COUNT][MK_DT_COUNT] = {
    [MK_DT_F32] = {
        [MK_DT_F16] = {{NULL, mk_f32_f16_vcvt_ukernel__f16c_nt_x32,
                        mk_f32_f16_vcvt_ukernel__avx512_nt_x32}},
        [MK_DT_BF16] = {{NULL, mk_f32_bf16_vcvt_ukernel__avx2_nt_x32,
                         mk_f32_bf16_vcvt_ukernel__avx512_nt_x32}},
    },
    [MK_DT_F16] = {
        [MK_DT_F32] = {{NULL, mk_f16_f32_vcvt_ukernel__f16c_nt_x16,
                        mk_f16_f32_vcvt_ukernel__avx512_nt_x16}},
    },
    [MK_DT_BF16] = {
        [MK_DT_F32] = {{NULL, mk_bf16_f32_vcvt_ukernel__avx2_nt_x16,
                        mk_bf16_f32_vcvt_ukernel__avx512_nt_x16}},
    },
};
#else
static const mk_vcvt_config mk_cast_stream_config[MK_DT_COUNT][MK_DT_COUNT]; /* all NULL */
#endif

size_t mk_dtype_size(int code) {
    switch (code) {
        case MK_DT_F32: return 4;
        case MK_DT_F64: return 8;
        case MK_DT_F16: return 2;
        case MK_DT_BF16: return 2;
        default: return 0;
    }
}

mk_vcvt_ukernel_fn mk_cast_select(int src_code, int dst_code, mk_isa isa) {
    if (src_code < 0 || src_code >= MK_DT_COUNT || dst_code < 0 || dst_code >= MK_DT_COUNT)
        return NULL;
    int level = (int)isa;
    if (level < 0) level = 0;
    if (level >= MK_ISA_COUNT) level = MK_ISA_COUNT - 1;
    return mk_cast_config[src_code][dst_code].ukernel[level];
}

/* The threshold in force (bench/casts.py --threshold changes it to measure both sides). */
static size_t mk_cast_parallel_min = MK_CAST_PARALLEL_MIN_BYTES;

mk_vcvt_ukernel_fn mk_cast_select_stream(int src_code, int dst_code, mk_isa isa) {
    if (src_code < 0 || src_code >= MK_DT_COUNT || dst_code < 0 || dst_code >= MK_DT_COUNT)
        return NULL;
    int level = (int)isa;
    if (level < 0) level = 0;
    if (level >= MK_ISA_COUNT) level = MK_ISA_COUNT - 1;
    return mk_cast_stream_config[src_code][dst_code].ukernel[level];
}

static size_t mk_cast_stream_min = MK_CAST_STREAM_MIN_BYTES;

size_t mk_cast_stream_min_bytes(void) { return mk_cast_stream_min; }

void mk_cast_set_stream_min_bytes(size_t nbytes) { mk_cast_stream_min = nbytes; }

size_t mk_cast_parallel_min_bytes(void) { return mk_cast_parallel_min; }

void mk_cast_set_parallel_min_bytes(size_t nbytes) { mk_cast_parallel_min = nbytes; }

/* Element-type conversions between float32, float64, float16 and bfloat16.
 *
 * Layout (XNNPACK style): one micro-kernel per (conversion, instruction set) in
 * `<src>-<dst>-vcvt-<isa>.c`, one table choosing them (cast-config.c) and one driver
 * (cast-run.c) that splits the work over OpenMP threads and handles in-place narrowing.
 *
 * Results are bit-identical, in every instruction-set path, to NumPy's `astype` for the
 * float16/float32/float64 pairs and to ml_dtypes' `astype` for the pairs involving
 * bfloat16 (the rules are spelled out in common/half.h). They assume the default
 * floating-point environment (round-to-nearest-even, no flush-to-zero), as NumPy does. */
#ifndef MK_CAST_H
#define MK_CAST_H

#include <stddef.h>
#include <stdint.h>

#include "isa.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The AVX2 and AVX-512 kernels exist on x86 only; elsewhere the config table holds the
 * generic kernels at every level (and mk_isa_detect never reports a SIMD level). */
#ifndef MK_CAST_X86
#define MK_CAST_X86 MK_X86
#endif

/* Function attributes of the two SIMD levels (see isa.h); whole loops live inside them. */
#define MK_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define MK_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

/* Element-type codes (also exported to Cython through _cast.pxd). */
typedef enum {
    MK_DT_F32 = 0,  /* IEEE binary32 */
    MK_DT_F64 = 1,  /* IEEE binary64 */
    MK_DT_F16 = 2,  /* IEEE binary16 (NumPy float16) */
    MK_DT_BF16 = 3, /* bfloat16 (ml_dtypes.bfloat16): the upper half of a binary32 */
    MK_DT_COUNT = 4
} mk_dtype_code;

/* Size in bytes of one element of `code` (0 for an unknown code). */
size_t mk_dtype_size(int code);

/* A conversion micro-kernel: converts `n` elements from `input` into `output`.
 * `output` may alias `input` (same start address) when the output element is not wider
 * than the input element: every kernel reads a block before it writes it, front to back. */
typedef void (*mk_vcvt_ukernel_fn)(size_t n, const void* input, void* output);

/* The kernel for (src, dst, isa) from the config table; NULL for an unknown code.
 * Identity pairs map to a plain copy kernel. An `isa` above the best implemented level for
 * a pair falls back to the best lower one. */
mk_vcvt_ukernel_fn mk_cast_select(int src_code, int dst_code, mk_isa isa);

/* The non-temporal-store variant of the (src, dst, isa) kernel, or NULL where there is
 * none; for large casts that do not alias. */
mk_vcvt_ukernel_fn mk_cast_select_stream(int src_code, int dst_code, mk_isa isa);

/* Work (bytes read + bytes written) from which a non-aliasing cast streams its output. */
size_t mk_cast_stream_min_bytes(void);
/* Change it (for measuring and tests; not synchronised with running casts). */
void mk_cast_set_stream_min_bytes(size_t nbytes);

/* Work (bytes read + bytes written) below which a cast stays on one thread. */
size_t mk_cast_parallel_min_bytes(void);
/* Change it (for measuring and tests; not synchronised with running casts). */
void mk_cast_set_parallel_min_bytes(size_t nbytes);

/* Convert `n` elements of `src_code` at `src` into `dst_code` at `dst` with up to
 * `nthreads` OpenMP threads (1: serial), using the kernels of level `isa`.
 * `dst` may equal `src` when dst's element size is <= src's (in-place narrowing, also in
 * parallel); any other overlap is the caller's error (checked in Cython before this runs).
 * Returns 0, or -1 for an unknown type code (nothing written). */
int mk_cast_run(const void* src, int src_code, void* dst, int dst_code, size_t n, int nthreads,
                mk_isa isa);

/* mk_cast_run into a new output, `dst`, that nothing has written yet (fresh pages). A large
 * output's pages are first populated in one call (Linux 5.14+ MADV_POPULATE_WRITE: the
 * kernel allocates and zeroes them, huge pages where it can, without a fault per page); then
 * the cast runs on up to `nthreads` threads. Where that call is not available the cast stays
 * on one thread: threads first-touching a fresh output at once stall at random (tens of ms;
 * docs/design.md, Dtype casts). */
int mk_cast_run_fresh(const void* src, int src_code, void* dst, int dst_code, size_t n,
                      int nthreads, mk_isa isa);

/* The non-temporal-store variant NAME of the conversion kernel BASE, for outputs far larger
 * than the caches (chosen by the driver, never in place): the output lines are written whole
 * without being read first. LINE elements of OUT_T fill one 64-byte line, which
 * STREAM(in, out) converts and streams; the unaligned head and the short tail go through
 * BASE, and a fence orders the streamed lines before whatever the caller does next. The
 * input is prefetched MK_CAST_PREFETCH_BYTES ahead, every line: one core's hardware prefetch
 * alone keeps too few lines in flight (a 64 MiB float32 -> bfloat16 cast on one thread of an
 * Intel Xeon: 6.8-8.0 ms without, 3.8-4.3 ms with 4-8 KiB ahead; float16 4.3 -> 3.9). */
#define MK_CAST_PREFETCH_BYTES 8192
#define MK_DEFINE_VCVT_NT(NAME, TARGET, IN_T, OUT_T, LINE, BASE, STREAM)                    \
    TARGET void NAME(size_t n, const void* input, void* output) {                           \
        const IN_T* in = (const IN_T*)input;                                                \
        OUT_T* out = (OUT_T*)output;                                                        \
        const size_t head = ((64u - ((uintptr_t)out & 63u)) & 63u) / sizeof(OUT_T);         \
        if (((uintptr_t)out % sizeof(OUT_T)) != 0 || head + (LINE) > n) {                   \
            BASE(n, in, out);                                                               \
            return;                                                                         \
        }                                                                                   \
        BASE(head, in, out);                                                                \
        in += head;                                                                         \
        out += head;                                                                        \
        n -= head;                                                                          \
        for (; n >= (LINE); n -= (LINE), in += (LINE), out += (LINE)) {                     \
            for (size_t b = 0; b < (LINE) * sizeof(IN_T); b += 64)                          \
                _mm_prefetch((const char*)in + MK_CAST_PREFETCH_BYTES + b, _MM_HINT_T0);    \
            STREAM(in, out);                                                                \
        }                                                                                   \
        _mm_sfence();                                                                       \
        BASE(n, in, out);                                                                   \
    }

/* ---- micro-kernels (name: mk_<src>_<dst>_vcvt_ukernel__<isa>_x<elements per step>) ---- */
#define MK_DECLARE_VCVT(name) void name(size_t n, const void* input, void* output)

MK_DECLARE_VCVT(mk_x16_copy_ukernel__memcpy);
MK_DECLARE_VCVT(mk_x32_copy_ukernel__memcpy);
MK_DECLARE_VCVT(mk_x64_copy_ukernel__memcpy);

MK_DECLARE_VCVT(mk_f32_f16_vcvt_ukernel__scalar_x1);
MK_DECLARE_VCVT(mk_f32_f16_vcvt_ukernel__f16c_x8);
MK_DECLARE_VCVT(mk_f32_f16_vcvt_ukernel__avx512_x16);
MK_DECLARE_VCVT(mk_f32_f16_vcvt_ukernel__f16c_nt_x32);
MK_DECLARE_VCVT(mk_f32_f16_vcvt_ukernel__avx512_nt_x32);

MK_DECLARE_VCVT(mk_f16_f32_vcvt_ukernel__scalar_x1);
MK_DECLARE_VCVT(mk_f16_f32_vcvt_ukernel__f16c_x8);
MK_DECLARE_VCVT(mk_f16_f32_vcvt_ukernel__avx512_x16);
MK_DECLARE_VCVT(mk_f16_f32_vcvt_ukernel__f16c_nt_x16);
MK_DECLARE_VCVT(mk_f16_f32_vcvt_ukernel__avx512_nt_x16);

MK_DECLARE_VCVT(mk_f32_bf16_vcvt_ukernel__scalar_x1);
MK_DECLARE_VCVT(mk_f32_bf16_vcvt_ukernel__avx2_x8);
MK_DECLARE_VCVT(mk_f32_bf16_vcvt_ukernel__avx512_x32);
MK_DECLARE_VCVT(mk_f32_bf16_vcvt_ukernel__avx2_nt_x32);
MK_DECLARE_VCVT(mk_f32_bf16_vcvt_ukernel__avx512_nt_x32);

MK_DECLARE_VCVT(mk_bf16_f32_vcvt_ukernel__scalar_x1);
MK_DECLARE_VCVT(mk_bf16_f32_vcvt_ukernel__avx2_x8);
MK_DECLARE_VCVT(mk_bf16_f32_vcvt_ukernel__avx512_x16);
MK_DECLARE_VCVT(mk_bf16_f32_vcvt_ukernel__avx2_nt_x16);
MK_DECLARE_VCVT(mk_bf16_f32_vcvt_ukernel__avx512_nt_x16);

MK_DECLARE_VCVT(mk_f32_f64_vcvt_ukernel__scalar_x1);
MK_DECLARE_VCVT(mk_f32_f64_vcvt_ukernel__avx2_x4);
MK_DECLARE_VCVT(mk_f32_f64_vcvt_ukernel__avx512_x8);

MK_DECLARE_VCVT(mk_f64_f32_vcvt_ukernel__scalar_x1);
MK_DECLARE_VCVT(mk_f64_f32_vcvt_ukernel__avx2_x4);
MK_DECLARE_VCVT(mk_f64_f32_vcvt_ukernel__avx512_x8);

MK_DECLARE_VCVT(mk_f64_f16_vcvt_ukernel__scalar_x1);
MK_DECLARE_VCVT(mk_f64_f16_vcvt_ukernel__f16c_x4);
MK_DECLARE_VCVT(mk_f64_f16_vcvt_ukernel__avx512_x8);

MK_DECLARE_VCVT(mk_f16_f64_vcvt_ukernel__scalar_x1);
MK_DECLARE_VCVT(mk_f16_f64_vcvt_ukernel__f16c_x8);
MK_DECLARE_VCVT(mk_f16_f64_vcvt_ukernel__avx512_x8);

MK_DECLARE_VCVT(mk_f64_bf16_vcvt_ukernel__scalar_x1);
MK_DECLARE_VCVT(mk_f64_bf16_vcvt_ukernel__avx2_x4);
MK_DECLARE_VCVT(mk_f64_bf16_vcvt_ukernel__avx512_x8);

MK_DECLARE_VCVT(mk_bf16_f64_vcvt_ukernel__scalar_x1);
MK_DECLARE_VCVT(mk_bf16_f64_vcvt_ukernel__avx2_x8);
MK_DECLARE_VCVT(mk_bf16_f64_vcvt_ukernel__avx512_x8);

MK_DECLARE_VCVT(mk_f16_bf16_vcvt_ukernel__scalar_x1);
MK_DECLARE_VCVT(mk_f16_bf16_vcvt_ukernel__f16c_x8);
MK_DECLARE_VCVT(mk_f16_bf16_vcvt_ukernel__avx512_x16);

MK_DECLARE_VCVT(mk_bf16_f16_vcvt_ukernel__scalar_x1);
MK_DECLARE_VCVT(mk_bf16_f16_vcvt_ukernel__f16c_x8);
MK_DECLARE_VCVT(mk_bf16_f16_vcvt_ukernel__avx512_x16);

#ifdef __cplusplus
}
#endif
#endif /* MK_CAST_H */

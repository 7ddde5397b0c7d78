/* Instruction-set levels and run-time CPU detection. */
#ifndef MK_ISA_H
#define MK_ISA_H

#ifdef __cplusplus
extern "C" {
#endif

/* MK_X86: the x86 SIMD kernels (AVX2, AVX-512: __attribute__((target)) and <immintrin.h>)
 * exist. Elsewhere (aarch64) their sources compile to nothing, the config tables hold the
 * generic kernels and mk_isa_detect() reports MK_ISA_GENERIC. */
#ifndef MK_X86
#if defined(__x86_64__) || defined(__i386__)
#define MK_X86 1
#else
#define MK_X86 0
#endif
#endif

/* In the entry points of AVX-512-only algorithms, on other architectures: the extensions link
 * them, but _conv.pyx calls them only at MK_ISA_AVX512, which mk_isa_detect() never reports
 * there. Reaching one is a bug: stop at once rather than return an unwritten output. */
#define MK_NOT_X86_UNREACHABLE() __builtin_trap()

/* Ordered: a level implies every lower one. */
typedef enum {
    MK_ISA_GENERIC = 0, /* portable C, compiled with the baseline flags */
    MK_ISA_AVX2 = 1,    /* AVX2 + FMA + F16C */
    MK_ISA_AVX512 = 2,  /* AVX-512 F/BW/VL/DQ + the AVX2 level */
    MK_ISA_COUNT = 3
} mk_isa;

/* The best level this CPU and operating system support (OS support read from XCR0). */
mk_isa mk_isa_detect(void);

/* Individual feature flags (for reports): nonzero when usable. */
int mk_cpu_has_avx512bf16(void);

/* ---- bfloat16 compute paths (values of mk_bf16_isa in gemm/gemm.h): 0 none, 1 AVX512-BF16
 * (vdpbf16ps), 2 AMX-BF16. mk_bf16_detect() returns the best this CPU and OS can run; for AMX
 * it asks Linux once for the tile state (arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)) and
 * falls back to AVX512-BF16 when the kernel refuses it (or is older than 5.16).
 * mk_amx_status() says what happened: 0 no AMX-BF16 on this CPU or OS, 1 granted, -1 the
 * request was refused. Both run the request at most once per process.
 * MODULEKIT_TEST_AMX_REFUSED=1 makes the request fail as a refusing kernel would (tests). */
int mk_bf16_detect(void);
int mk_amx_status(void);
/* The path used unless another is chosen: AMX where granted, else AVX512-BF16 where it beats
 * float32 FMAs (AMD), else none ("medium" then computes in float32). */
int mk_bf16_default(void);

#ifdef __cplusplus
}
#endif
#endif /* MK_ISA_H */

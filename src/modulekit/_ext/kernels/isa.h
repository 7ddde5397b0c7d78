/* Instruction-set levels and run-time CPU detection. */
#ifndef MK_ISA_H
#define MK_ISA_H

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif /* MK_ISA_H */

/* The qd8-f32-qc8w configuration table (see qgemm.h): for each ISA level the GEMM tile, its
 * register block (which fixes the packed panel width), the row quantizer and the
 * convolutions' im2col gather. This is the
 * only place they are chosen. AVX512-VNNI is a CPU flag beyond the AVX-512 level: without it
 * (and on the AVX2 and generic levels) the portable kernels run. */
#include "isa.h"
#include "qgemm.h"

float mk_qd8_quantize__scalar(size_t, size_t, const float *, uint8_t *);
void mk_qd8_f32_qc8w_gemm_4x16__scalar(size_t, size_t, size_t, const uint8_t *, size_t,
                                        const float *, const void *, void *, size_t,
                                        const uint8_t *, const mk_qgemm_epilogue *);
#if MK_X86
float mk_qd8_quantize__avx512vnni(size_t, size_t, const float *, uint8_t *);
void mk_qd8_f32_qc8w_gemm_8x32__avx512vnni(size_t, size_t, size_t, const uint8_t *, size_t,
                                            const float *, const void *, void *, size_t,
                                            const uint8_t *, const mk_qgemm_epilogue *);
void mk_qd8_f32_qc8w_gemm_32x32__amx(size_t, size_t, size_t, const uint8_t *, size_t,
                                     const float *, const void *, void *, size_t,
                                     const uint8_t *, const mk_qgemm_epilogue *);
void mk_qconv_im2col__avx512(const mk_qconv_geom *, const uint8_t *, uint8_t, size_t, size_t,
                             uint8_t *, size_t);
void mk_qd8_amx_begin(void);
void mk_qd8_amx_end(void);
#include <cpuid.h>
#endif

static const mk_qd8_config mk_qd8_scalar = {
    "qd8-f32-qc8w-gemm-4x16-scalar", 4, 16, 4, mk_qd8_f32_qc8w_gemm_4x16__scalar,
    mk_qd8_quantize__scalar, mk_qconv_im2col__scalar, NULL, NULL,
};

#if MK_X86
static const mk_qd8_config mk_qd8_avx512vnni = {
    "qd8-f32-qc8w-gemm-8x32-avx512vnni", 8, 32, 4, mk_qd8_f32_qc8w_gemm_8x32__avx512vnni,
    mk_qd8_quantize__avx512vnni, mk_qconv_im2col__avx512, NULL, NULL,
};

/* AMX: 32 rows a tile (two A tiles), K in blocks of 64; the same panel width as VNNI */
static const mk_qd8_config mk_qd8_amx = {
    "qd8-f32-qc8w-gemm-32x32-amx", 32, 32, 64, mk_qd8_f32_qc8w_gemm_32x32__amx,
    mk_qd8_quantize__avx512vnni, mk_qconv_im2col__avx512, mk_qd8_amx_begin, mk_qd8_amx_end,
};

static int mk_cpu_has_amx_int8(void) {
    unsigned int a, b, c, d;
    if (__get_cpuid_max(0, 0) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (d >> 25) & 1;
}
#endif

const mk_qd8_config *mk_qd8_get_config(int isa, int amx) {
#if MK_X86
    if (isa >= MK_ISA_AVX512 && amx && mk_cpu_has_amx_int8()) return &mk_qd8_amx;
    if (isa >= MK_ISA_AVX512 && __builtin_cpu_supports("avx512vnni")) return &mk_qd8_avx512vnni;
#else
    (void)isa;
    (void)amx;
#endif
    return &mk_qd8_scalar;
}

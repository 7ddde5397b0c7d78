/* The GEMM's epilogue activations, from the one math of common/act.h: RELU and CLAMP run on
 * the accumulators in the microkernels; every other activation runs on the stored output tile
 * (hot in L1) through these tile functions, the same row functions nn.functional's activations
 * and the convolution epilogue evaluate, so a fused Linear + activation gives the bits of the
 * two steps. The portable microkernels apply mk_act_scalar_f32/f64 per element. */
#include "common/act.h"
#include "gemm.h"

float mk_act_scalar_f32(float x, const mk_epilogue *ep) {
    return mk_act_f32x1(x, ep->act, ep->lo32, ep->hi32);
}

double mk_act_scalar_f64(double x, const mk_epilogue *ep) {
    return mk_act_f64x1(x, ep->act, ep->lo, ep->hi);
}

/* rows x nc floats in place, row stride ldc, by one ISA's row function */
#define MK_DEFINE_ACT_TILE(NAME, ROW)                                                         \
    void NAME(size_t rows, size_t nc, void *c_, size_t ldc, const mk_epilogue *ep) {          \
        float *c = (float *)c_;                                                               \
        for (size_t i = 0; i < rows; i++)                                                     \
            ROW(nc, c + i * ldc, c + i * ldc, ep->act, ep->lo32, ep->hi32);                   \
    }

MK_DEFINE_ACT_TILE(mk_act_tile_f32_scalar, mk_f32_vact__scalar)
#if MK_X86
MK_DEFINE_ACT_TILE(mk_act_tile_f32_avx2, mk_f32_vact__avx2)
MK_DEFINE_ACT_TILE(mk_act_tile_f32_avx512, mk_f32_vact__avx512)
#endif

void mk_act_tile_f64_scalar(size_t rows, size_t nc, void *c_, size_t ldc, const mk_epilogue *ep) {
    double *c = (double *)c_; /* in/out: rows x nc, row stride ldc */
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < nc; j++)
            c[i * ldc + j] = mk_act_f64x1(c[i * ldc + j], ep->act, ep->lo, ep->hi);
}

/* The recurrent-cell configuration table: for each (compute dtype, ISA level) the fused
 * gate kernels of rnn.h. This is the ONLY place where they are chosen. float64 runs the
 * portable C cells at every level (common/act.h's float64 reference: libm). */
#include <stddef.h>

#include "rnn.h"

static const mk_rnn_config f32_scalar = {
    "f32-rnn-cell-scalar",
    MK_ISA_GENERIC,
    {mk_f32_rnn_lstm__scalar, mk_f32_rnn_gru__scalar, mk_f32_rnn_tanh__scalar,
     mk_f32_rnn_relu__scalar},
};

static const mk_rnn_config f64_scalar = {
    "f64-rnn-cell-scalar",
    MK_ISA_GENERIC,
    {mk_f64_rnn_lstm__scalar, mk_f64_rnn_gru__scalar, mk_f64_rnn_tanh__scalar,
     mk_f64_rnn_relu__scalar},
};

#if MK_X86
static const mk_rnn_config f32_avx2 = {
    "f32-rnn-cell-avx2",
    MK_ISA_AVX2,
    {mk_f32_rnn_lstm__avx2, mk_f32_rnn_gru__avx2, mk_f32_rnn_tanh__avx2, mk_f32_rnn_relu__avx2},
};

static const mk_rnn_config f32_avx512 = {
    "f32-rnn-cell-avx512",
    MK_ISA_AVX512,
    {mk_f32_rnn_lstm__avx512, mk_f32_rnn_gru__avx512, mk_f32_rnn_tanh__avx512,
     mk_f32_rnn_relu__avx512},
};
#endif

const mk_rnn_config *mk_rnn_get_config(int f64, int isa) {
    if (f64)
        return &f64_scalar;
#if MK_X86
    if (isa >= MK_ISA_AVX512)
        return &f32_avx512;
    if (isa >= MK_ISA_AVX2)
        return &f32_avx2;
#else
    (void)isa;
#endif
    return &f32_scalar;
}

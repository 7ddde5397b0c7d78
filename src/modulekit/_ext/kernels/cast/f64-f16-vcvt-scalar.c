/* float64 -> float16, generic C (any CPU); the reference the SIMD kernels match. */
#include "cast.h"
#include "common/half.h"

void mk_f64_f16_vcvt_ukernel__scalar_x1(size_t n, const void* input, void* output) {
    const double* in = (const double*)input; /* input: n float64 */
    uint16_t* out = (uint16_t*)output;           /* output: n float16 (may alias input when not wider) */
    for (size_t i = 0; i < n; i++) {
        const double x = in[i];
        out[i] = mk_f64_to_f16_bits(x);
    }
}

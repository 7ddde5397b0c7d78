/* float64 -> float32, generic C (any CPU); the reference the SIMD kernels match. */
#include "cast.h"
#include "common/half.h"

void mk_f64_f32_vcvt_ukernel__scalar_x1(size_t n, const void* input, void* output) {
    const double* in = (const double*)input; /* input: n float64 */
    float* out = (float*)output;           /* output: n float32 (may alias input when not wider) */
    for (size_t i = 0; i < n; i++) {
        const double x = in[i];
        out[i] = (float)x;
    }
}

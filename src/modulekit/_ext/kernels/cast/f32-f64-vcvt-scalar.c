/* float32 -> float64, generic C (any CPU); the reference the SIMD kernels match. */
#include "cast.h"
#include "common/half.h"

void mk_f32_f64_vcvt_ukernel__scalar_x1(size_t n, const void* input, void* output) {
    const float* in = (const float*)input; /* input: n float32 */
    double* out = (double*)output;           /* output: n float64 (may alias input when not wider) */
    for (size_t i = 0; i < n; i++) {
        const float x = in[i];
        out[i] = (double)x;
    }
}

/* bfloat16 -> float32, generic C (any CPU); the reference the SIMD kernels match. */
#include "cast.h"
#include "common/half.h"

void mk_bf16_f32_vcvt_ukernel__scalar_x1(size_t n, const void* input, void* output) {
    const uint16_t* in = (const uint16_t*)input; /* input: n bfloat16 */
    uint32_t* out = (uint32_t*)output;           /* output: n float32 (may alias input when not wider) */
    for (size_t i = 0; i < n; i++) {
        const uint16_t x = in[i];
        out[i] = mk_bf16_to_f32_bits(x);
    }
}

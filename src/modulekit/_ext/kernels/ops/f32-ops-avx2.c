/* AVX2 + FMA + F16C row kernels: ops/f32-ops.inc.h on 8 lanes, and the float16 widening. */
#include "common/vmath-avx2.h"
#include "common/vops-avx2.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <math.h>

#include "ops.h"

#define MK_OPS_FN(name) mk_##name##_f32_avx2
#include "ops/f32-ops.inc.h"
#include "common/vmath-undef.h"

MK_TARGET_AVX2 void mk_f16_widen_avx2(size_t n, const uint16_t *src, float *dst, int accumulate)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
        if (accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(dst + i));
        _mm256_storeu_ps(dst + i, v);
    }
    if (i < n) mk_f16_widen_scalar(n - i, src + i, dst + i, accumulate);
}

#endif /* MK_X86 */

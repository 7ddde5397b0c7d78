/* The bfloat16 pair panels of the bfloat16-compute convolution (layout in conv.h), from the
 * float32 igemm panels: portable C, once per layer. */
#include <string.h>

#include "common/half.h"
#include "conv.h"

/* float32 -> bfloat16 as the tiles round their inputs (vcvtne2ps2bf16): nearest even, with
 * float32 denormals flushed to a signed zero (common/half.h's conversion keeps them). */
static uint16_t bf16_at(const void *panel, int wtype, size_t i) {
    if (wtype == MK_W_BF16) return ((const uint16_t *)panel)[i];
    const uint32_t u = mk_f32_bits(((const float *)panel)[i]);
    return (u & 0x7F800000u) == 0 ? (uint16_t)((u >> 16) & 0x8000u) : mk_f32_to_bf16_bits(u);
}

static float f32_at(const void *panel, int wtype, size_t i) {
    return wtype == MK_W_BF16 ? mk_bf16_to_f32(((const uint16_t *)panel)[i])
                              : ((const float *)panel)[i];
}

size_t mk_bf16_conv_panels_words(size_t npanels, size_t K) {
    return npanels * (MK_CONV_MR + (K + 1) / 2 * MK_CONV_MR);
}

void mk_bf16_conv_pack_panels(const void *packed, int wtype, size_t npanels, size_t K,
                              uint32_t *dst) {
    const size_t kp = (K + 1) / 2, in_panel = MK_CONV_MR + K * MK_CONV_MR;
    const size_t esize = wtype == MK_W_BF16 ? 2 : 4;
    for (size_t p = 0; p < npanels; p++) {
        const unsigned char *src = (const unsigned char *)packed + p * in_panel * esize;
        uint32_t *d = dst + p * (MK_CONV_MR + kp * MK_CONV_MR);
        for (int r = 0; r < MK_CONV_MR; r++) { /* the bias stays float32 */
            const float b = f32_at(src, wtype, (size_t)r);
            memcpy(d + r, &b, sizeof b);
        }
        d += MK_CONV_MR;
        for (size_t q = 0; q < kp; q++)
            for (int r = 0; r < MK_CONV_MR; r++) {
                const size_t k0 = 2 * q, k1 = 2 * q + 1;
                const uint32_t lo = bf16_at(src, wtype, MK_CONV_MR + k0 * MK_CONV_MR + r);
                const uint32_t hi =
                    k1 < K ? bf16_at(src, wtype, MK_CONV_MR + k1 * MK_CONV_MR + r) : 0u;
                d[q * MK_CONV_MR + r] = lo | hi << 16;
            }
    }
}

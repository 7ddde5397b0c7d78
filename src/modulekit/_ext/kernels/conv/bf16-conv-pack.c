/* The bfloat16 pair panels of the bfloat16-compute convolution, both paths (AVX512-BF16 and
 * AMX; the layouts in conv.h), from the float32 igemm panels: portable C, once per layer. */
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

/* The panel shape of path bf16 for the layer: MR, kpa, and the pair rows (taps of kpt). */
static void panel_shape(int bf16, int cin_g, int taps, mk_bf16_igemm_config *c, int *ntaps,
                        size_t *kpt) {
    mk_conv_bf16_lanes(bf16, 0, cin_g, taps, 0, c);
    const size_t rows = c->image ? (size_t)cin_g : (size_t)cin_g * taps; /* per tap */
    *ntaps = c->image ? taps : 1;
    *kpt = mk_bf16_pair_rows(rows, c->kpa);
}

size_t mk_bf16_conv_panels_words(int bf16, int groups, int cout_g, int cin_g, int taps) {
    mk_bf16_igemm_config c;
    int nt;
    size_t kpt;
    panel_shape(bf16, cin_g, taps, &c, &nt, &kpt);
    return (size_t)groups * ((cout_g + c.mr - 1) / c.mr) * (c.mr + nt * kpt * c.mr);
}

void mk_bf16_conv_pack_panels(int bf16, const void *packed, int wtype, int groups, int cout_g,
                              int cin_g, int taps, uint32_t *dst) {
    mk_bf16_igemm_config c;
    int nt;
    size_t kpt;
    panel_shape(bf16, cin_g, taps, &c, &nt, &kpt);
    const int mr = c.mr, kpa = c.kpa;
    const size_t K = (size_t)cin_g * taps, words = mr + nt * kpt * mr;
    const size_t in_panel = MK_CONV_MR + K * MK_CONV_MR; /* the float32 igemm panel */
    const int npg8 = (cout_g + MK_CONV_MR - 1) / MK_CONV_MR, npg = (cout_g + mr - 1) / mr;
    const size_t rows = c.image ? (size_t)cin_g : K; /* of a tap: channels, or every k */
    const size_t esize = wtype == MK_W_BF16 ? 2 : 4;
    for (int grp = 0; grp < groups; grp++)
        for (int p = 0; p < npg; p++) {
            uint32_t *d = dst + ((size_t)grp * npg + p) * words;
            memset(d, 0, words * sizeof *d);
            for (int r = 0; r < mr; r++) {
                const int co = p * mr + r; /* channel in the group */
                if (co >= cout_g) break;
                const unsigned char *src = /* the channel's float32 igemm panel */
                    (const unsigned char *)packed +
                    ((size_t)grp * npg8 + co / MK_CONV_MR) * in_panel * esize;
                src += (co % MK_CONV_MR) * esize; /* its row of the float32 panel */
                const float b = f32_at(src, wtype, 0); /* the bias stays float32 */
                memcpy(d + r, &b, sizeof b);
                for (int t = 0; t < nt; t++)
                    for (size_t q = 0; q < (rows + 1) / 2; q++) {
                        /* the k of rows 2q, 2q + 1 of tap t (k = ci * taps + tap) */
                        const size_t k0 = c.image ? 2 * q * taps + t : 2 * q;
                        const size_t k1 = c.image ? k0 + taps : k0 + 1;
                        const uint32_t lo = bf16_at(src, wtype, MK_CONV_MR + k0 * MK_CONV_MR);
                        const uint32_t hi =
                            2 * q + 1 < rows ? bf16_at(src, wtype, MK_CONV_MR + k1 * MK_CONV_MR) : 0u;
                        const size_t P = t * kpt + q;
                        d[mr + P / kpa * mr * kpa + r / 16 * 16 * kpa + r % 16 * kpa + P % kpa] =
                            lo | hi << 16;
                    }
            }
        }
}

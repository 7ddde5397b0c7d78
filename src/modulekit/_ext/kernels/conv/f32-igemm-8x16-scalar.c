/* float32 indirect-GEMM microkernel, portable C: 8 output channels x 16 output pixels. */
#include "conv.h"

void mk_f32_igemm_8x16_scalar(size_t K, const float *a, const float *b, const ptrdiff_t *koff,
                              const ptrdiff_t *voff, int nlanes, int mrows, float *c,
                              ptrdiff_t c_rs, const float *res, const mk_seg *segs, int nseg,
                              int act) {
    (void)voff; /* one vector of 16 lanes: voff[0] is 0 */
    float acc[8][16];
    const int nl = nlanes < 16 ? nlanes : 16;
    for (int r = 0; r < 8; r++)
        for (int i = 0; i < 16; i++) acc[r][i] = a[r];
    a += 8;
    for (size_t k = 0; k < K; k++) {
        const float *bk = b + koff[k];
        float bv[16];
        for (int i = 0; i < 16; i++) bv[i] = i < nl ? bk[i] : 0.0f;
        for (int r = 0; r < 8; r++) {
            const float ar = a[r];
            for (int i = 0; i < 16; i++) acc[r][i] += ar * bv[i];
        }
        a += 8;
    }
    for (int s = 0; s < nseg; s++) {
        for (int r = 0; r < mrows; r++) {
            float *cr = c + r * c_rs + segs[s].off;
            const float *rr = res ? res + r * c_rs + segs[s].off : NULL;
            for (int i = segs[s].lo; i < segs[s].hi; i++) {
                float v = acc[r][i];
                if (rr) v += rr[i];
                cr[i] = MK_CONV_ACT(v, act);
            }
        }
    }
}

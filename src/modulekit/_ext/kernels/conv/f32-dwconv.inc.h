/* The depthwise convolution's row kernels (see f32-dwconv-driver.c), written once against the
 * vector vocabulary of common/vops-*.h and instantiated by f32-dwconv-avx2.c (8 lanes) and
 * f32-dwconv-avx512.c (16 lanes): the activation is the ISA's common/vmath.inc.h one. The
 * including file defines MK_DWCONV_FN(name) (the instantiation's names). */

/* ph: channel phase image; toff[t]: offset of tap t; lanes [0, OW) of the run: out[i] =
 * bias + sum_t w[t] * ph[toff[t] + i] (+ res[i]), then the activation. 2 vectors a step, masked
 * tail. */
VM_TARGET void MK_DWCONV_FN(dwconv_row)(int T, const float *ph, const ptrdiff_t *toff,
                                        const float *w, float bias, int OW, float *out,
                                        const float *res, int act)
{
    int ow = 0;
    for (; ow + 2 * VM_W <= OW; ow += 2 * VM_W) {
        VM_T a0 = VM_SET1(bias), a1 = a0;
        for (int t = 0; t < T; t++) {
            const VM_T wt = VM_SET1(w[t]);
            const float *p = ph + toff[t] + ow;
            a0 = VM_FMA(wt, VM_LOAD(p), a0);
            a1 = VM_FMA(wt, VM_LOAD(p + VM_W), a1);
        }
        if (res) {
            a0 = VM_ADD(a0, VM_LOAD(res + ow));
            a1 = VM_ADD(a1, VM_LOAD(res + ow + VM_W));
        }
        VM_STORE(out + ow, VM_FN(act)(a0, act, 0.0f, 0.0f));
        VM_STORE(out + ow + VM_W, VM_FN(act)(a1, act, 0.0f, 0.0f));
    }
    for (; ow < OW; ow += VM_W) {
        const VM_M m = VM_TAIL((size_t)(OW - ow));
        VM_T a0 = VM_SET1(bias);
        for (int t = 0; t < T; t++)
            a0 = VM_FMA(VM_SET1(w[t]), VM_MASKLOAD(ph + toff[t] + ow, m), a0);
        if (res) a0 = VM_ADD(a0, VM_MASKLOAD(res + ow, m));
        VM_MASKSTORE(out + ow, m, VM_FN(act)(a0, act, 0.0f, 0.0f));
    }
}

/* Rows of the output grid (width Wq) to the output (width OW): + residual, activation. */
VM_TARGET void MK_DWCONV_FN(grid_rows)(const float *grid, int Wq, int OH, int OW, float *out,
                                       const float *res, int act)
{
    for (int oh = 0; oh < OH; oh++) {
        const float *gr = grid + (ptrdiff_t)oh * Wq;
        float *o = out + (ptrdiff_t)oh * OW;
        const float *r = res ? res + (ptrdiff_t)oh * OW : NULL;
        for (int ow = 0; ow < OW; ow += VM_W) {
            const VM_M m = VM_TAIL((size_t)(OW - ow));
            VM_T v = VM_MASKLOAD(gr + ow, m);
            if (r) v = VM_ADD(v, VM_MASKLOAD(r + ow, m));
            VM_MASKSTORE(o + ow, m, VM_FN(act)(v, act, 0.0f, 0.0f));
        }
    }
}

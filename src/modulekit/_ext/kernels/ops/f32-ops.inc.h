/* The float32 row kernels of LayerNorm and softmax (see ops.h), written once against the vector
 * vocabulary of common/vops-*.h and instantiated by f32-ops-avx2.c (8 lanes) and
 * f32-ops-avx512.c (16 lanes): masked tails, float32 sums (the generic level, ops-scalar.c,
 * sums in double). The including file defines MK_OPS_FN(name) (the instantiation's names). */

VM_TARGET void MK_OPS_FN(layernorm_row)(size_t n, const float *x, const float *res,
                                        const float *gamma, const float *beta, float eps,
                                        float *y)
{
    /* one read of x (+res): sums of the values shifted by the first one (no cancellation for
     * rows with a large mean), 2 accumulators; the second pass reads y, still in L1 */
    const VM_T shift = VM_SET1(res ? x[0] + res[0] : x[0]);
    VM_T s0 = VM_ZERO(), s1 = VM_ZERO();
    VM_T q0 = VM_ZERO(), q1 = VM_ZERO();
    size_t i = 0;
    for (; i + 2 * VM_W <= n; i += 2 * VM_W) {
        VM_T a = VM_LOAD(x + i), b = VM_LOAD(x + i + VM_W);
        if (res) {
            a = VM_ADD(a, VM_LOAD(res + i));
            b = VM_ADD(b, VM_LOAD(res + i + VM_W));
        }
        VM_STORE(y + i, a);
        VM_STORE(y + i + VM_W, b);
        a = VM_SUB(a, shift);
        b = VM_SUB(b, shift);
        s0 = VM_ADD(s0, a);
        s1 = VM_ADD(s1, b);
        q0 = VM_FMA(a, a, q0);
        q1 = VM_FMA(b, b, q1);
    }
    for (; i < n; i += VM_W) {
        const VM_M m = VM_TAIL(n - i);
        VM_T a = VM_MASKLOAD(x + i, m);
        if (res) a = VM_ADD(a, VM_MASKLOAD(res + i, m));
        VM_MASKSTORE(y + i, m, a);
        a = VM_MASKZ(m, VM_SUB(a, shift));
        s0 = VM_ADD(s0, a);
        q0 = VM_FMA(a, a, q0);
    }
    float sum = VM_HSUM(VM_ADD(s0, s1)), sq = VM_HSUM(VM_ADD(q0, q1));
    float m = sum / (float)n;
    float var = sq / (float)n - m * m;
    if (var < 0.0f) var = 0.0f;
    const VM_T mean = VM_ADD(shift, VM_SET1(m));
    const VM_T rstd = VM_SET1((float)(1.0 / sqrt((double)var + (double)eps)));
    for (i = 0; i < n; i += VM_W) {
        const VM_M k = VM_TAIL(n - i);
        VM_T v = VM_MUL(VM_SUB(VM_MASKLOAD(y + i, k), mean), rstd);
        if (gamma) v = VM_MUL(v, VM_MASKLOAD(gamma + i, k));
        if (beta) v = VM_ADD(v, VM_MASKLOAD(beta + i, k));
        VM_MASKSTORE(y + i, k, v);
    }
}

VM_TARGET void MK_OPS_FN(softmax_row)(size_t n, float *x, const float *mask, float scale)
{
    const VM_T vs = VM_SET1(scale);
    VM_T mx = VM_SET1(-INFINITY);
    size_t i;
    for (i = 0; i < n; i += VM_W) {
        const VM_M m = VM_TAIL(n - i);
        VM_T v = VM_MUL(VM_MASKLOAD(x + i, m), vs);
        if (mask) v = VM_ADD(v, VM_MASKLOAD(mask + i, m));
        VM_MASKSTORE(x + i, m, v);
        mx = VM_MASK_MAX(mx, m, v);
    }
    const VM_T vmax = VM_SET1(VM_HMAX(mx));
    VM_T sum = VM_ZERO();
    for (i = 0; i < n; i += VM_W) {
        const VM_M m = VM_TAIL(n - i);
        const VM_T e = VM_MASKZ(m, VM_FN(exp)(VM_SUB(VM_MASKLOAD(x + i, m), vmax)));
        VM_MASKSTORE(x + i, m, e);
        sum = VM_ADD(sum, e); /* +0 outside m: sum unchanged there */
    }
    const VM_T inv = VM_SET1(1.0f / VM_HSUM(sum));
    for (i = 0; i < n; i += VM_W) {
        const VM_M m = VM_TAIL(n - i);
        VM_MASKSTORE(x + i, m, VM_MUL(VM_MASKLOAD(x + i, m), inv));
    }
}

/* The group normalisation's span kernels (see norm.h), written once against the vector
 * vocabulary of common/vops-*.h and instantiated by f32-norm-avx2.c (8 lanes) and
 * f32-norm-avx512.c (16 lanes): 4 vectors a step (4 accumulators), masked tails. The including
 * file defines MK_NORM_FN(name) (the instantiation's names) and, where the level has a
 * streaming-store affine pass, MK_NORM_NT_FN (its name). */

VM_TARGET void MK_NORM_FN(moments)(size_t n, const float *x, float shift, double *sum,
                                   double *sumsq)
{
    const VM_T sh = VM_SET1(shift);
    double s = 0.0, q = 0.0;
    size_t i = 0;
    while (i < n) {
        size_t end = n - i > MK_NORM_BLOCK ? i + MK_NORM_BLOCK : n;
        VM_T s0 = VM_ZERO(), s1 = VM_ZERO(), s2 = VM_ZERO(), s3 = VM_ZERO();
        VM_T q0 = VM_ZERO(), q1 = VM_ZERO(), q2 = VM_ZERO(), q3 = VM_ZERO();
        for (; i + 4 * VM_W <= end; i += 4 * VM_W) {
            const VM_T a = VM_SUB(VM_LOAD(x + i), sh);
            const VM_T b = VM_SUB(VM_LOAD(x + i + VM_W), sh);
            const VM_T c = VM_SUB(VM_LOAD(x + i + 2 * VM_W), sh);
            const VM_T d = VM_SUB(VM_LOAD(x + i + 3 * VM_W), sh);
            s0 = VM_ADD(s0, a);
            s1 = VM_ADD(s1, b);
            s2 = VM_ADD(s2, c);
            s3 = VM_ADD(s3, d);
            q0 = VM_FMA(a, a, q0);
            q1 = VM_FMA(b, b, q1);
            q2 = VM_FMA(c, c, q2);
            q3 = VM_FMA(d, d, q3);
        }
        for (; i < end; i += VM_W) {
            const VM_M m = VM_TAIL(end - i);
            const VM_T a = VM_MASKZ(m, VM_SUB(VM_MASKLOAD(x + i, m), sh));
            s0 = VM_ADD(s0, a);
            q0 = VM_FMA(a, a, q0);
        }
        s += VM_HSUM_F64(VM_ADD(VM_ADD(s0, s1), VM_ADD(s2, s3)));
        q += VM_HSUM_F64(VM_ADD(VM_ADD(q0, q1), VM_ADD(q2, q3)));
        if (i > end) i = end;
    }
    *sum += s;
    *sumsq += q;
}

/* y[i] = (x[i] - mean) * scale + bias for i in [i, n): 4 vectors a step, stored by VM_STREAM
 * when stream (y + i vector-aligned then) or else VM_STORE, and a masked tail. */
VM_ATTR void affine_span(size_t i, size_t n, const float *x, float mean, float scale,
                         float bias, float *y, int stream)
{
    const VM_T m = VM_SET1(mean), a = VM_SET1(scale), b = VM_SET1(bias);
    for (; i + 4 * VM_W <= n; i += 4 * VM_W) {
        const VM_T v0 = VM_FMA(VM_SUB(VM_LOAD(x + i), m), a, b);
        const VM_T v1 = VM_FMA(VM_SUB(VM_LOAD(x + i + VM_W), m), a, b);
        const VM_T v2 = VM_FMA(VM_SUB(VM_LOAD(x + i + 2 * VM_W), m), a, b);
        const VM_T v3 = VM_FMA(VM_SUB(VM_LOAD(x + i + 3 * VM_W), m), a, b);
        if (stream) {
            VM_STREAM(y + i, v0);
            VM_STREAM(y + i + VM_W, v1);
            VM_STREAM(y + i + 2 * VM_W, v2);
            VM_STREAM(y + i + 3 * VM_W, v3);
        } else {
            VM_STORE(y + i, v0);
            VM_STORE(y + i + VM_W, v1);
            VM_STORE(y + i + 2 * VM_W, v2);
            VM_STORE(y + i + 3 * VM_W, v3);
        }
    }
    for (; i < n; i += VM_W) {
        const VM_M k = VM_TAIL(n - i);
        VM_MASKSTORE(y + i, k, VM_FMA(VM_SUB(VM_MASKLOAD(x + i, k), m), a, b));
    }
}

VM_TARGET void MK_NORM_FN(affine)(size_t n, const float *x, float mean, float scale, float bias,
                                  float *y)
{
    affine_span(0, n, x, mean, scale, bias, y, 0);
}

#ifdef MK_NORM_NT_FN
/* The affine pass with non-temporal stores: the output goes to memory without first being read
 * into the cache (a normal store reads each line it writes), for outputs far larger than the
 * caches. Masked stores up to a vector-aligned y, streaming stores, a masked tail; the caller
 * fences (mk_norm_sfence_*) before the output is read. */
VM_TARGET void MK_NORM_NT_FN(size_t n, const float *x, float mean, float scale, float bias,
                             float *y)
{
    /* y is float-aligned (the entry point guarantees it), so fewer than VM_W floats lead to
     * the next vector boundary */
    const size_t align = VM_W * sizeof(float);
    size_t head = ((align - ((uintptr_t)y & (align - 1))) & (align - 1)) / sizeof(float);
    if (head > n) head = n;
    affine_span(0, head, x, mean, scale, bias, y, 0);
    affine_span(head, n, x, mean, scale, bias, y, 1);
}
#endif

/* The row kernels of the 2-D resampling (see resample.h), written once against the vector
 * vocabulary of common/vops-*.h and instantiated by f32-resample-avx2.c (8 lanes,
 * vpgatherdd) and f32-resample-avx512.c (16 lanes, vgatherdps): gathers for the column taps,
 * masked tails. The including file defines MK_RESAMPLE_FN(name) (the instantiation's names). */

VM_TARGET void MK_RESAMPLE_FN(lerp_row)(size_t n, const float *row, const int32_t *x0,
                                        const int32_t *x1, const float *w0, const float *w1,
                                        float *out)
{
    size_t i = 0;
    for (; i + VM_W <= n; i += VM_W) {
        const VM_T a = VM_GATHER(row, x0 + i), b = VM_GATHER(row, x1 + i);
        const VM_T t = VM_MUL(a, VM_LOAD(w0 + i));
        VM_STORE(out + i, VM_FMA(b, VM_LOAD(w1 + i), t));
    }
    if (i < n) {
        const VM_M m = VM_TAIL(n - i);
        const VM_T a = VM_MASKGATHER(row, x0 + i, m), b = VM_MASKGATHER(row, x1 + i, m);
        const VM_T t = VM_MUL(a, VM_MASKLOAD(w0 + i, m));
        VM_MASKSTORE(out + i, m, VM_FMA(b, VM_MASKLOAD(w1 + i, m), t));
    }
}

VM_TARGET void MK_RESAMPLE_FN(blend_row)(size_t n, const float *p, const float *q, float a,
                                         float b, float *out)
{
    const VM_T va = VM_SET1(a), vb = VM_SET1(b);
    size_t i = 0;
    for (; i + 2 * VM_W <= n; i += 2 * VM_W) {
        const VM_T t0 = VM_MUL(VM_LOAD(p + i), va), t1 = VM_MUL(VM_LOAD(p + i + VM_W), va);
        VM_STORE(out + i, VM_FMA(VM_LOAD(q + i), vb, t0));
        VM_STORE(out + i + VM_W, VM_FMA(VM_LOAD(q + i + VM_W), vb, t1));
    }
    for (; i + VM_W <= n; i += VM_W) {
        const VM_T t = VM_MUL(VM_LOAD(p + i), va);
        VM_STORE(out + i, VM_FMA(VM_LOAD(q + i), vb, t));
    }
    if (i < n) {
        const VM_M m = VM_TAIL(n - i);
        const VM_T t = VM_MUL(VM_MASKLOAD(p + i, m), va);
        VM_MASKSTORE(out + i, m, VM_FMA(VM_MASKLOAD(q + i, m), vb, t));
    }
}

VM_TARGET void MK_RESAMPLE_FN(gather_row)(size_t n, const float *row, const int32_t *x,
                                          float *out)
{
    size_t i = 0;
    for (; i + VM_W <= n; i += VM_W) VM_STORE(out + i, VM_GATHER(row, x + i));
    if (i < n) {
        const VM_M m = VM_TAIL(n - i);
        VM_MASKSTORE(out + i, m, VM_MASKGATHER(row, x + i, m));
    }
}

VM_TARGET void MK_RESAMPLE_FN(wsum_rows)(size_t n, size_t ntaps, const float *base,
                                         size_t stride, const int32_t *idx, const float *w,
                                         size_t ws, float *out)
{
    size_t i = 0;
    for (; i + VM_W <= n; i += VM_W) {
        VM_T acc = VM_MUL(VM_LOAD(base + (size_t)idx[0] * stride + i), VM_SET1(w[0]));
        for (size_t t = 1; t < ntaps; t++)
            acc = VM_FMA(VM_LOAD(base + (size_t)idx[t * ws] * stride + i), VM_SET1(w[t * ws]),
                         acc);
        VM_STORE(out + i, acc);
    }
    if (i < n) {
        const VM_M m = VM_TAIL(n - i);
        VM_T acc = VM_MUL(VM_MASKLOAD(base + (size_t)idx[0] * stride + i, m), VM_SET1(w[0]));
        for (size_t t = 1; t < ntaps; t++)
            acc = VM_FMA(VM_MASKLOAD(base + (size_t)idx[t * ws] * stride + i, m),
                         VM_SET1(w[t * ws]), acc);
        VM_MASKSTORE(out + i, m, acc);
    }
}

VM_TARGET void MK_RESAMPLE_FN(wgather_row)(size_t n, size_t ntaps, const float *row,
                                           const int32_t *idx, const float *w, size_t ws,
                                           float *out)
{
    size_t o = 0;
    for (; o + VM_W <= n; o += VM_W) {
        VM_T acc = VM_MUL(VM_GATHER(row, idx + o), VM_LOAD(w + o));
        for (size_t t = 1; t < ntaps; t++)
            acc = VM_FMA(VM_GATHER(row, idx + t * ws + o), VM_LOAD(w + t * ws + o), acc);
        VM_STORE(out + o, acc);
    }
    if (o < n) {
        const VM_M m = VM_TAIL(n - o);
        VM_T acc = VM_ZERO();
        for (size_t t = 0; t < ntaps; t++) {
            const VM_T v = VM_MASKGATHER(row, idx + t * ws + o, m);
            const VM_T wt = VM_MASKLOAD(w + t * ws + o, m);
            acc = t ? VM_FMA(v, wt, acc) : VM_MUL(v, wt);
        }
        VM_MASKSTORE(out + o, m, acc);
    }
}

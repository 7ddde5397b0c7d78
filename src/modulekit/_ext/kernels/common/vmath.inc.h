/* The float32 activation math of every kernel family, written once against a small vector
 * vocabulary (common/vops-scalar.h, vops-avx2.h, vops-avx512.h) and instantiated per ISA by
 * vmath-scalar.h (float), vmath-avx2.h (__m256) and vmath-avx512.h (__m512). Every
 * instantiation performs the same IEEE operations in the same order, so the three give the
 * same bits (see common/act.h).
 *
 *   exp(x)       (float32: softmax, GELU's erf form) Cody-Waite reduction r = x - n ln2
 *                (two-part ln2, n = round(x log2 e)), Cephes' degree-6 polynomial for (e^r - 1 - r) / r^2, exp = 1 + (r + r^2 P(r)),
 *                scaled by 2^n with one rounding (gradual underflow: x <= -104 gives +0;
 *                x >= 88.73 gives +inf). About 1 ulp.
 *   sigmoid, silu, tanh: float32, from exp(-|x|) and expm1(-2|x|) (below); gelu_tanh:
 *                evaluated in double (below) and rounded once.
 *   gelu_erf(x)  x Phi(x): q = Phi(-|x|) = erfc(|x|/sqrt 2) / 2 by Numerical Recipes'
 *                Chebyshev form erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), with z^2 =
 *                x^2/2 carried exactly (FMA split) into the exp reduction; x >= 0: x (1 - q),
 *                x < 0: x q (relative accuracy in both tails). |x| is clamped to 15, where q
 *                is 0 in float32: gelu(-inf) = -inf * 0 = NaN, as torch.
 *   hardswish(x) x * min(max(x + 3, 0), 6) / 6, torch's operations in torch's order.
 *   relu, relu6, clamp: max/min that keep NaN (and -0.0).
 *
 * The vocabulary, for a float32 vector VM_T of VM_W lanes of VM_ELEM (float):
 *   VM_TARGET (the ISA's function attribute), VM_ATTR (storage class and target attribute),
 *   VM_FN(name) (the instantiation's name), VM_SET1(c), VM_ADD, VM_SUB, VM_MUL, VM_DIV,
 *   VM_FMA(a, b, c) (a*b + c, one rounding),
 *   VM_FNMA(a, b, c) (c - a*b), VM_FMS(a, b, c) (a*b - c), VM_MAX(a, b) (a > b ? a : b),
 *   VM_MIN(a, b) (a < b ? a : b) (both: b when either is NaN), VM_ABS, VM_ROUND (to nearest,
 *   ties to even), VM_SCALE2(p, n) (p * 2^n for integral n in [-170, 130], one rounding; NaN
 *   n or p gives NaN), VM_SEL_LT(a, b, x, y) (a < b ? x : y), VM_SEL_GE(a, b, x, y)
 *   (a >= b ? x : y) (both: y when a or b is NaN), VM_SIGN_OF(v, s) (v | sign bit of s, for
 *   v >= +0 or NaN); the same VD_* operations for the double vector VD_T (VD_SCALE2: n in
 *   [-1100, 1100], +inf past the range), VD_FN(name), and VM_WIDEN(x, lo, hi) (declares the
 *   double vectors lo and hi holding x's lanes) and VM_NARROW(lo, hi) (back to one float
 *   vector, each lane rounded once). For the kernel templates written against it (not used by
 *   the math): VM_LOAD(p), VM_STORE(p, v) (unaligned), VM_LOADN(p, n) (the first n lanes,
 *   n in [1, VM_W]; the others read as 0, their memory untouched) and VM_STOREN(p, v, n) (the
 *   first n lanes stored).
 *
 * The SIMD vocabularies (vops-avx2.h, vops-avx512.h) also carry what the kernel templates
 * (norm/f32-norm.inc.h, ...) use: VM_M (a lane mask), VM_TAIL(k) (lanes [0, k); k >= VM_W:
 * all), VM_ZERO(), VM_STREAM(p, v) (non-temporal, p vector-aligned), VM_MASKLOAD(p, m) (+0
 * outside m, nothing read there), VM_MASKSTORE(p, m, v), VM_MASKZ(m, v) (+0 outside m),
 * VM_MASK_MAX(acc, m, v) (max(acc, v) in m, acc elsewhere; AVX2: max(acc, -inf) there, the
 * same but for a NaN acc), VM_HSUM(v), VM_HMAX(v) (the lanes' float sum and maximum, halves
 * folded: lane i with lane i + VM_W/2 first), VM_HSUM_F64(v) (the sum of the lanes widened to
 * double, halves folded), VM_GATHER(base, idx) (base[idx[i]] for VM_W int32 indices at idx)
 * and VM_MASKGATHER(base, idx, m) (in m, +0 elsewhere; idx read in m only). The operands of
 * these are evaluated more than once. */

VM_ATTR VM_T VM_FN(exp)(VM_T x) {
    const VM_T xc = VM_MIN(VM_SET1(89.0f), VM_MAX(VM_SET1(-104.0f), x)); /* NaN kept */
    const VM_T n = VM_ROUND(VM_MUL(xc, VM_SET1(1.44269504088896341f)));
    VM_T r = VM_FNMA(n, VM_SET1(0.693359375f), xc); /* exact: n * 0.693359375 has few bits */
    r = VM_FNMA(n, VM_SET1(-2.12194440e-4f), r);
    VM_T p = VM_SET1(1.9875691500e-4f);
    p = VM_FMA(p, r, VM_SET1(1.3981999507e-3f));
    p = VM_FMA(p, r, VM_SET1(8.3334519073e-3f));
    p = VM_FMA(p, r, VM_SET1(4.1665795894e-2f));
    p = VM_FMA(p, r, VM_SET1(1.6666665459e-1f));
    p = VM_FMA(p, r, VM_SET1(5.0000001201e-1f));
    p = VM_ADD(VM_SET1(1.0f), VM_FMA(p, VM_MUL(r, r), r));
    return VM_SCALE2(p, n);
}

/* sigmoid and SiLU in float32 (the convolution epilogue's SiLU stays cheap): e = exp(-|x|),
 * (x >= 0 ? 1 : e) / (1 + e) and (x >= 0 ? x : x e) / (1 + e): no overflow, both tails keep
 * relative accuracy (gradual underflow below x ~ -87). Within 3 ulp. */
VM_ATTR VM_T VM_FN(sigmoid)(VM_T x) {
    const VM_T one = VM_SET1(1.0f);
    const VM_T e = VM_FN(exp)(VM_SUB(VM_SET1(0.0f), VM_ABS(x)));
    return VM_DIV(VM_SEL_GE(x, VM_SET1(0.0f), one, e), VM_ADD(one, e));
}

VM_ATTR VM_T VM_FN(silu)(VM_T x) { /* -inf: -inf * 0 = NaN, as torch */
    const VM_T e = VM_FN(exp)(VM_SUB(VM_SET1(0.0f), VM_ABS(x)));
    return VM_DIV(VM_SEL_GE(x, VM_SET1(0.0f), x, VM_MUL(x, e)), VM_ADD(VM_SET1(1.0f), e));
}

/* tanh in float32 (the recurrent cells' gates, nn.functional.tanh, the epilogues): m =
 * expm1(-2|x|) by the exp reduction above with the polynomial of e^r - 1 itself (degree 7:
 * below 5e-9 relative on |r| <= ln2/2) and expm1 = (s - 1) + s q, s = 2^n (for |x| < 0.17,
 * n = 0: m is the polynomial alone, no cancellation); tanh = -m / (2 + m) with the sign of x.
 * |x| is clamped to 10 (tanh rounds to 1 from 9.011; NaN kept). Within 3 ulp (2.5 measured). */
VM_ATTR VM_T VM_FN(tanh)(VM_T x) {
    const VM_T z = VM_MUL(VM_SET1(-2.0f), VM_MIN(VM_SET1(10.0f), VM_ABS(x)));
    const VM_T n = VM_ROUND(VM_MUL(z, VM_SET1(1.44269504088896341f)));
    VM_T r = VM_FNMA(n, VM_SET1(0.693145751953125f), z); /* exact: ln2's high part has 16 bits */
    r = VM_FNMA(n, VM_SET1(1.428606765330187045e-06f), r);
    VM_T p = VM_SET1(1.0f / 5040.0f);
    p = VM_FMA(p, r, VM_SET1(1.0f / 720.0f));
    p = VM_FMA(p, r, VM_SET1(1.0f / 120.0f));
    p = VM_FMA(p, r, VM_SET1(1.0f / 24.0f));
    p = VM_FMA(p, r, VM_SET1(1.0f / 6.0f));
    p = VM_FMA(p, r, VM_SET1(0.5f));
    const VM_T q = VM_FMA(VM_MUL(p, r), r, r); /* e^r - 1 */
    const VM_T s = VM_SCALE2(VM_SET1(1.0f), n);
    const VM_T m = VM_FMA(s, q, VM_SUB(s, VM_SET1(1.0f)));
    return VM_SIGN_OF(VM_DIV(VM_SUB(VM_SET1(0.0f), m), VM_ADD(VM_SET1(2.0f), m)), x);
}

/* ---- double-precision evaluation: GELU (tanh form) ---------------------------------------
 * The float32 lanes are widened to double, evaluated there, and rounded to float32 once:
 * within one float32 rounding (0.5 ulp + ~1e-15 relative) of the exact value, both tails
 * included, where a float32 evaluation loses up to ~100 ulp in GELU-tanh's negative tail (its
 * exp argument carries the rounding errors of x^3). */

VM_ATTR VD_T VD_FN(exp)(VD_T x) {
    /* x >= 710 gives +inf (2^1024 overflows, also for +inf); x <= -708 gives exp(-708) (the
     * callers only need "tiny" there); NaN kept */
    const VD_T xc = VD_MIN(VD_SET1(710.0), VD_MAX(VD_SET1(-708.0), x));
    const VD_T n = VD_ROUND(VD_MUL(xc, VD_SET1(1.4426950408889634074)));
    VD_T r = VD_FNMA(n, VD_SET1(6.93147180369123816490e-01), xc);
    r = VD_FNMA(n, VD_SET1(1.90821492927058770002e-10), r);
    /* degree-11 Taylor polynomial on |r| <= ln2/2: truncation < 1e-14 relative */
    VD_T p = VD_SET1(1.0 / 39916800.0);
    p = VD_FMA(p, r, VD_SET1(1.0 / 3628800.0));
    p = VD_FMA(p, r, VD_SET1(1.0 / 362880.0));
    p = VD_FMA(p, r, VD_SET1(1.0 / 40320.0));
    p = VD_FMA(p, r, VD_SET1(1.0 / 5040.0));
    p = VD_FMA(p, r, VD_SET1(1.0 / 720.0));
    p = VD_FMA(p, r, VD_SET1(1.0 / 120.0));
    p = VD_FMA(p, r, VD_SET1(1.0 / 24.0));
    p = VD_FMA(p, r, VD_SET1(1.0 / 6.0));
    p = VD_FMA(p, r, VD_SET1(0.5));
    p = VD_FMA(p, r, VD_SET1(1.0));
    p = VD_FMA(p, r, VD_SET1(1.0));
    return VD_SCALE2(p, n);
}

VM_ATTR VD_T VD_FN(gelu_tanh)(VD_T x) {
    /* x/2 (1 + tanh(u)) == x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3) */
    const VD_T x3 = VD_MUL(VD_MUL(x, x), x);
    const VD_T u = VD_MUL(VD_SET1(0.79788456080286535588), VD_FMA(VD_SET1(0.044715), x3, x));
    return VD_DIV(x, VD_ADD(VD_SET1(1.0), VD_FN(exp)(VD_MUL(VD_SET1(-2.0), u))));
}

/* the float32 GELU (tanh form): widen, evaluate in double, round once */
VM_ATTR VM_T VM_FN(gelu_tanh)(VM_T x) {
    VM_WIDEN(x, lo, hi);
    return VM_NARROW(VD_FN(gelu_tanh)(lo), VD_FN(gelu_tanh)(hi));
}

VM_ATTR VM_T VM_FN(gelu_erf)(VM_T x) {
    const VM_T ax = VM_MIN(VM_SET1(15.0f), VM_ABS(x)); /* NaN stays NaN */
    const VM_T s = VM_MUL(ax, ax);                     /* x^2 = s + s_lo exactly */
    const VM_T s_lo = VM_FMS(ax, ax, s);
    const VM_T nhs = VM_MUL(VM_SET1(-0.5f), s); /* -s/2, exact */
    const VM_T z = VM_MUL(ax, VM_SET1(0.70710678118654752440f));
    const VM_T t = VM_DIV(VM_SET1(1.0f), VM_FMA(VM_SET1(0.5f), z, VM_SET1(1.0f)));
    VM_T p = VM_SET1(0.17087277f);
    p = VM_FMA(p, t, VM_SET1(-0.82215223f));
    p = VM_FMA(p, t, VM_SET1(1.48851587f));
    p = VM_FMA(p, t, VM_SET1(-1.13520398f));
    p = VM_FMA(p, t, VM_SET1(0.27886807f));
    p = VM_FMA(p, t, VM_SET1(-0.18628806f));
    p = VM_FMA(p, t, VM_SET1(0.09678418f));
    p = VM_FMA(p, t, VM_SET1(0.37409196f));
    p = VM_FMA(p, t, VM_SET1(1.00002368f));
    p = VM_FMA(p, t, VM_SET1(-1.26551223f));
    /* exp(p - s/2 - s_lo/2) = 2^n exp(r), the reduction subtracted from s/2 before rounding */
    const VM_T n = VM_ROUND(VM_MUL(VM_ADD(p, nhs), VM_SET1(1.44269504088896341f)));
    VM_T r = VM_FNMA(n, VM_SET1(0.693145751953125f), nhs);
    r = VM_FNMA(n, VM_SET1(1.428606765330187045e-06f), r);
    r = VM_ADD(r, VM_FNMA(VM_SET1(0.5f), s_lo, p));
    /* exp(r) / 2: the Taylor coefficients halved (exactly) */
    VM_T e = VM_SET1(0.5f / 5040.0f);
    e = VM_FMA(e, r, VM_SET1(0.5f / 720.0f));
    e = VM_FMA(e, r, VM_SET1(0.5f / 120.0f));
    e = VM_FMA(e, r, VM_SET1(0.5f / 24.0f));
    e = VM_FMA(e, r, VM_SET1(0.5f / 6.0f));
    e = VM_FMA(e, r, VM_SET1(0.25f));
    e = VM_FMA(e, r, VM_SET1(0.5f));
    e = VM_FMA(e, r, VM_SET1(0.5f));
    const VM_T q = VM_SCALE2(VM_MUL(t, e), n); /* erfc(z) / 2 */
    /* x >= 0: x (1 - q); else x q (NaN: x q, NaN) */
    return VM_SEL_GE(x, VM_SET1(0.0f), VM_MUL(x, VM_FNMA(VM_SET1(1.0f), q, VM_SET1(1.0f))),
                     VM_MUL(x, q));
}

VM_ATTR VM_T VM_FN(hardswish)(VM_T x) {
    VM_T t = VM_ADD(x, VM_SET1(3.0f));
    t = VM_MIN(VM_SET1(6.0f), VM_MAX(VM_SET1(0.0f), t));
    return VM_DIV(VM_MUL(x, t), VM_SET1(6.0f));
}

/* act(x) for a run-time activation code (mk_act); lo, hi: MK_ACT_CLAMP's bounds. */
VM_ATTR VM_T VM_FN(act)(VM_T x, int act, float lo, float hi) {
    switch (act) {
        case MK_ACT_RELU:
            return VM_MAX(VM_SET1(0.0f), x);
        case MK_ACT_CLAMP:
            return VM_MIN(VM_SET1(hi), VM_MAX(VM_SET1(lo), x));
        case MK_ACT_RELU6:
            return VM_MIN(VM_SET1(6.0f), VM_MAX(VM_SET1(0.0f), x));
        case MK_ACT_HARDSWISH:
            return VM_FN(hardswish)(x);
        case MK_ACT_GELU_ERF:
            return VM_FN(gelu_erf)(x);
        case MK_ACT_GELU_TANH:
            return VM_FN(gelu_tanh)(x);
        case MK_ACT_SILU:
            return VM_FN(silu)(x);
        case MK_ACT_SIGMOID:
            return VM_FN(sigmoid)(x);
        case MK_ACT_TANH:
            return VM_FN(tanh)(x);
        default:
            return x;
    }
}

/* Vectorised transcendental activations for float32 tiles, evaluated in double precision
 * (the float32 result is rounded once from a value accurate to ~1e-7 relative or better):
 *   exp:      Cody-Waite reduction by ln2 (hi/lo split), degree-11 Taylor polynomial on
 *             |r| <= ln2/2 (truncation < 1e-14 relative), scaling by 2^n
 *   erfc:     Chebyshev-fitted erfc(z) = t exp(-z^2 + P(t)), t = 1/(1 + z/2) (Numerical
 *             Recipes 6.2), fractional error < 1.2e-7 for every z >= 0; erfc(-z) = 2 - erfc(z)
 *   tanh:     odd Taylor polynomial for |x| < 1/16, else 1 - 2/(exp(2|x|) + 1)
 * Included by gemm-act-avx512.c / gemm-act-avx2.c after defining, for a double vector D_T:
 *   D_TARGET, D_SET1, D_ADD, D_SUB, D_MUL, D_DIV, D_FMA(a,b,c), D_FNMA(a,b,c) (c - a*b),
 *   D_MAX/D_MIN (second operand on NaN), D_ABS, D_OR_SIGN(v, s) (v with the sign of s),
 *   D_ROUND(v) (nearest integer), D_SCALE2(p, n) (p * 2^n), D_SELECT_LT(a, b, x, y)
 *   (a < b ? x : y per lane). NaN inputs propagate to NaN outputs. */

static inline D_TARGET D_T mk_d_exp(D_T x) {
    x = D_MAX(D_SET1(-708.0), x);
    x = D_MIN(D_SET1(708.0), x);
    const D_T n = D_ROUND(D_MUL(x, D_SET1(1.4426950408889634074)));
    D_T r = D_FNMA(n, D_SET1(6.93147180369123816490e-01), x);
    r = D_FNMA(n, D_SET1(1.90821492927058770002e-10), r);
    D_T p = D_SET1(1.0 / 39916800.0);
    p = D_FMA(p, r, D_SET1(1.0 / 3628800.0));
    p = D_FMA(p, r, D_SET1(1.0 / 362880.0));
    p = D_FMA(p, r, D_SET1(1.0 / 40320.0));
    p = D_FMA(p, r, D_SET1(1.0 / 5040.0));
    p = D_FMA(p, r, D_SET1(1.0 / 720.0));
    p = D_FMA(p, r, D_SET1(1.0 / 120.0));
    p = D_FMA(p, r, D_SET1(1.0 / 24.0));
    p = D_FMA(p, r, D_SET1(1.0 / 6.0));
    p = D_FMA(p, r, D_SET1(0.5));
    p = D_FMA(p, r, D_SET1(1.0));
    p = D_FMA(p, r, D_SET1(1.0));
    return D_SCALE2(p, n);
}

static inline D_TARGET D_T mk_d_sigmoid(D_T x) {
    const D_T one = D_SET1(1.0);
    return D_DIV(one, D_ADD(one, mk_d_exp(D_SUB(D_SET1(0.0), x))));
}

static inline D_TARGET D_T mk_d_silu(D_T x) {
    return D_DIV(x, D_ADD(D_SET1(1.0), mk_d_exp(D_SUB(D_SET1(0.0), x))));
}

static inline D_TARGET D_T mk_d_tanh(D_T x) {
    const D_T ax = D_ABS(x);
    const D_T x2 = D_MUL(ax, ax);
    /* |x| < 1/16: x - x^3/3 + 2x^5/15 - 17x^7/315 + 62x^9/2835 */
    D_T ps = D_SET1(62.0 / 2835.0);
    ps = D_FMA(ps, x2, D_SET1(-17.0 / 315.0));
    ps = D_FMA(ps, x2, D_SET1(2.0 / 15.0));
    ps = D_FMA(ps, x2, D_SET1(-1.0 / 3.0));
    ps = D_FMA(D_MUL(ps, x2), ax, ax);
    const D_T e = mk_d_exp(D_MUL(D_SET1(2.0), D_MIN(D_SET1(20.0), ax)));
    const D_T pl = D_SUB(D_SET1(1.0), D_DIV(D_SET1(2.0), D_ADD(e, D_SET1(1.0))));
    return D_OR_SIGN(D_SELECT_LT(ax, D_SET1(0.0625), ps, pl), x);
}

static inline D_TARGET D_T mk_d_gelu_tanh(D_T x) {
    /* x/2 (1 + tanh(u)) == x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3) */
    const D_T x3 = D_MUL(D_MUL(x, x), x);
    const D_T u = D_MUL(D_SET1(0.79788456080286535588), D_FMA(D_SET1(0.044715), x3, x));
    return D_DIV(x, D_ADD(D_SET1(1.0), mk_d_exp(D_MUL(D_SET1(-2.0), u))));
}

static inline D_TARGET D_T mk_d_gelu_erf(D_T x) {
    /* x/2 erfc(-x / sqrt(2)) */
    const D_T z = D_MUL(x, D_SET1(-0.70710678118654752440));
    const D_T az = D_ABS(z);
    const D_T t = D_DIV(D_SET1(1.0), D_FMA(D_SET1(0.5), az, D_SET1(1.0)));
    D_T p = D_SET1(0.17087277);
    p = D_FMA(p, t, D_SET1(-0.82215223));
    p = D_FMA(p, t, D_SET1(1.48851587));
    p = D_FMA(p, t, D_SET1(-1.13520398));
    p = D_FMA(p, t, D_SET1(0.27886807));
    p = D_FMA(p, t, D_SET1(-0.18628806));
    p = D_FMA(p, t, D_SET1(0.09678418));
    p = D_FMA(p, t, D_SET1(0.37409196));
    p = D_FMA(p, t, D_SET1(1.00002368));
    p = D_FMA(p, t, D_SET1(-1.26551223));
    p = D_FNMA(az, az, p);
    const D_T ec = D_MUL(t, mk_d_exp(p)); /* erfc(|z|) */
    const D_T erfc_z = D_SELECT_LT(z, D_SET1(0.0), D_SUB(D_SET1(2.0), ec), ec);
    return D_MUL(D_MUL(D_SET1(0.5), x), erfc_z);
}

/* GELU (erf form) in float32 arithmetic, about 3x cheaper than the double evaluation above
 * (BERT's feed-forward epilogue). gelu(x) = x Phi(x) with q = Phi(-|x|) = erfc(z)/2,
 * z = |x|/sqrt(2), from the same Numerical Recipes form erfc(z) = t exp(-z^2 + P(t)), and
 * Phi(x) = 1 - q for x >= 0 (1 - q >= 1/2: no cancellation), q for x < 0: relative accuracy
 * in both tails (no 1 + erf(z) cancellation). z^2 = x^2/2 is carried exactly as s + s_lo
 * (FMA split) and the exp reduction n ln2 is subtracted from s before anything is rounded,
 * so the exp argument (up to ~100 in size) is exact to about 2e-7 absolute. |x| is clamped
 * to 14, past which Phi(x) rounds to 1 (or q underflows; a subnormal q only costs absolute
 * error far below the smallest normal). Measured on every 61st float32 with |x| < 20: within
 * 4.6e-7 relative of the exact value (or the smallest normal, absolute); the double
 * evaluation is within 3e-7.
 * Included after defining, for a float vector F_T: F_TARGET, F_SET1, F_ADD, F_MUL,
 * F_FMA(a,b,c), F_FMS(a,b,c) (a*b - c), F_FNMA(a,b,c) (c - a*b), F_MIN (second operand on
 * NaN), F_ABS, F_ROUND, F_SCALE2(p, n), F_RECIP(d) (1/d to ~1 ulp), F_SELECT_GE0(x, a, b)
 * (x >= 0 ? a : b per lane, b for NaN). */
#ifdef F_T
static inline F_TARGET F_T mk_f_gelu_erf(F_T x) {
    const F_T ax = F_MIN(F_SET1(14.0f), F_ABS(x)); /* NaN stays NaN */
    const F_T s = F_MUL(ax, ax);                    /* x^2 = s + s_lo exactly */
    const F_T s_lo = F_FMS(ax, ax, s);
    const F_T nhs = F_MUL(F_SET1(-0.5f), s); /* -s/2, exact */
    const F_T z = F_MUL(ax, F_SET1(0.70710678118654752440f));
    const F_T t = F_RECIP(F_FMA(F_SET1(0.5f), z, F_SET1(1.0f)));
    F_T p = F_SET1(0.17087277f);
    p = F_FMA(p, t, F_SET1(-0.82215223f));
    p = F_FMA(p, t, F_SET1(1.48851587f));
    p = F_FMA(p, t, F_SET1(-1.13520398f));
    p = F_FMA(p, t, F_SET1(0.27886807f));
    p = F_FMA(p, t, F_SET1(-0.18628806f));
    p = F_FMA(p, t, F_SET1(0.09678418f));
    p = F_FMA(p, t, F_SET1(0.37409196f));
    p = F_FMA(p, t, F_SET1(1.00002368f));
    p = F_FMA(p, t, F_SET1(-1.26551223f));
    /* exp(p - s/2 - s_lo/2) = 2^n exp(r) */
    const F_T n = F_ROUND(F_MUL(F_ADD(p, nhs), F_SET1(1.44269504088896341f)));
    F_T r = F_FNMA(n, F_SET1(0.693145751953125f), nhs);
    r = F_FNMA(n, F_SET1(1.428606765330187045e-06f), r);
    r = F_ADD(r, F_FNMA(F_SET1(0.5f), s_lo, p));
    /* exp(r) / 2: the Taylor coefficients halved (exactly) */
    F_T e = F_SET1(0.5f / 5040.0f);
    e = F_FMA(e, r, F_SET1(0.5f / 720.0f));
    e = F_FMA(e, r, F_SET1(0.5f / 120.0f));
    e = F_FMA(e, r, F_SET1(0.5f / 24.0f));
    e = F_FMA(e, r, F_SET1(0.5f / 6.0f));
    e = F_FMA(e, r, F_SET1(0.25f));
    e = F_FMA(e, r, F_SET1(0.5f));
    e = F_FMA(e, r, F_SET1(0.5f));
    const F_T q = F_SCALE2(F_MUL(t, e), n); /* erfc(z) / 2 */
    /* x >= 0: x (1 - q); x < 0: -|x| q (|x| clamped: -1e30 gives -0, not -1e30 q) */
    return F_SELECT_GE0(x, F_MUL(x, F_FNMA(F_SET1(1.0f), q, F_SET1(1.0f))),
                        F_FNMA(ax, q, F_SET1(0.0f)));
}
#endif

/* Vectorised float32 recurrent cells (rnn.h), included by f32-rnn-cell-avx2.c and
 * f32-rnn-cell-avx512.c after they define, for a float vector V_T of V_W lanes:
 *   V_TARGET, V_SET1, V_ADD, V_SUB, V_MUL, V_RECIP(d) (1/d to ~1 ulp: a hardware estimate
 *   and one Newton step, no division), V_FMA(a, b, c) (a*b + c),
 *   V_FNMA(a, b, c) (c - a*b), V_MAX(a, b) (b when either is NaN), V_ABS, V_ROUND (nearest),
 *   V_POW2(n) (2^n for integral n in [-127, 0]), V_SELECT_GE0(x, a, b) (x >= 0 ? a : b),
 *   V_COPYSIGN(t, x) (|t| with the sign of x), V_LOAD(p), V_STORE(p, v), and the partial
 *   V_LOADN(p, n) (lanes past n read as 0) / V_STOREN(p, v, n) (lanes past n untouched),
 *   and SFX (the ISA suffix of the function names).
 *
 * Nonlinearities, in float32 (about 2 ulp; no libm call):
 *   exp(z) and expm1(z) for z <= 0: z clamped to >= -87 (exp(-87) = 1.6e-38 stays normal;
 *     exp returns 0 below it),
 *     n = round(z / ln2) (magic bias), r = z - n ln2 (Cody-Waite, ln2 split so n * ln2_hi is
 *     exact),
 *     q = expm1(r) = r + r^2 (1/2 + r/6 + ... + r^5/5040) (|r| <= ln2/2: truncation below
 *     5e-9 relative), s = 2^n: exp(z) = s + s q, expm1(z) = (s - 1) + s q (exact for
 *     small |z|, where n = 0: no cancellation, unlike exp(z) - 1);
 *   sigmoid(x) = 1 / (1 + e) for x >= 0, e / (1 + e) for x < 0, e = exp(-|x|);
 *   tanh(x) = sign(x) * -m / (2 + m), m = expm1(-2|x|) (accurate near 0, saturates to +-1).
 * NaN inputs give NaN outputs. */

#define MK_CAT3_(a, b, c) a##b##c
#define MK_CAT3(a, b, c) MK_CAT3_(a, b, c)
#define MK_FN(kind) MK_CAT3(mk_f32_rnn_, kind, SFX)

/* exp(z) and expm1(z) for z <= 0 (or NaN) */
static inline V_TARGET V_T mk_v_expm1_neg(V_T z, V_T *e) {
    const V_T under = V_SUB(V_SET1(-87.0f), z); /* >= 0: exp(z) <= 1.65e-38, returned as 0 */
    z = V_MAX(V_SET1(-87.0f), z);
    /* n = round(z / ln2) by the magic-bias trick: adding 1.5 * 2^23 + 127 leaves n + 127 in
     * the low mantissa bits (z / ln2 in [-125.6, 0]), which shifted into the exponent field
     * are s = 2^n directly */
    const V_T nb = V_FMA(z, V_SET1(1.44269504088896341f), V_SET1(12583039.0f));
    const V_T s = V_BITS_SHL23(nb);
    const V_T n = V_SUB(nb, V_SET1(12583039.0f));
    V_T r = V_FNMA(n, V_SET1(0.693145751953125f), z);
    r = V_FNMA(n, V_SET1(1.428606765330187045e-06f), r);
    V_T p = V_SET1(1.0f / 5040.0f);
    p = V_FMA(p, r, V_SET1(1.0f / 720.0f));
    p = V_FMA(p, r, V_SET1(1.0f / 120.0f));
    p = V_FMA(p, r, V_SET1(1.0f / 24.0f));
    p = V_FMA(p, r, V_SET1(1.0f / 6.0f));
    p = V_FMA(p, r, V_SET1(0.5f));
    const V_T q = V_FMA(V_MUL(p, r), r, r);
    *e = V_SELECT_GE0(under, V_SET1(0.0f), V_FMA(s, q, s)); /* (NaN: the NaN) */
    return V_FMA(s, q, V_SUB(s, V_SET1(1.0f)));
}

static inline V_TARGET V_T mk_v_sigmoid(V_T x) {
    V_T e;
    (void)mk_v_expm1_neg(V_SUB(V_SET1(0.0f), V_ABS(x)), &e);
    const V_T q = V_RECIP(V_ADD(V_SET1(1.0f), e));
    return V_SELECT_GE0(x, q, V_MUL(e, q));
}

static inline V_TARGET V_T mk_v_tanh(V_T x) {
    V_T e;
    const V_T m = mk_v_expm1_neg(V_MUL(V_SET1(-2.0f), V_ABS(x)), &e);
    const V_T t = V_MUL(V_SUB(V_SET1(0.0f), m), V_RECIP(V_ADD(V_SET1(2.0f), m)));
    return V_COPYSIGN(t, x);
}

#define LD(p) (n == V_W ? V_LOAD(p) : V_LOADN((p), n))
#define ST(p, v)                 \
    do {                         \
        if (n == V_W)            \
            V_STORE((p), (v));   \
        else                     \
            V_STOREN((p), (v), n); \
    } while (0)

/* lanes [j, j + n) of one row, n <= V_W */
static inline V_TARGET void mk_v_lstm(const float *x, const float *g, float *c, float *hs,
                                      float *o, size_t h, size_t j, size_t n) {
    const V_T ig = mk_v_sigmoid(V_ADD(LD(x + j), LD(g + j)));
    const V_T fg = mk_v_sigmoid(V_ADD(LD(x + h + j), LD(g + h + j)));
    const V_T gg = mk_v_tanh(V_ADD(LD(x + 2 * h + j), LD(g + 2 * h + j)));
    const V_T og = mk_v_sigmoid(V_ADD(LD(x + 3 * h + j), LD(g + 3 * h + j)));
    const V_T cn = V_FMA(fg, LD(c + j), V_MUL(ig, gg));
    const V_T hn = V_MUL(og, mk_v_tanh(cn));
    ST(c + j, cn);
    ST(hs + j, hn);
    if (o)
        ST(o + j, hn);
}

static inline V_TARGET void mk_v_gru(const float *x, const float *g, float *hs, float *o,
                                     size_t h, size_t j, size_t n) {
    const V_T r = mk_v_sigmoid(V_ADD(LD(x + j), LD(g + j)));
    const V_T z = mk_v_sigmoid(V_ADD(LD(x + h + j), LD(g + h + j)));
    const V_T nn = mk_v_tanh(V_FMA(r, LD(g + 2 * h + j), LD(x + 2 * h + j)));
    const V_T hn = V_FMA(z, V_SUB(LD(hs + j), nn), nn);
    ST(hs + j, hn);
    if (o)
        ST(o + j, hn);
}

static inline V_TARGET void mk_v_simple(const float *x, const float *g, float *hs, float *o,
                                        size_t j, size_t n, int relu) {
    const V_T s = V_ADD(LD(x + j), LD(g + j));
    const V_T hn = relu ? V_MAX(V_SET1(0.0f), s) : mk_v_tanh(s);
    ST(hs + j, hn);
    if (o)
        ST(o + j, hn);
}

#undef LD
#undef ST

#define MK_ROWS_BEGIN                                                  \
    for (size_t b = 0; b < m; b++) {                                   \
        const float *x = (const float *)xv + b * ldx;                  \
        const float *g = (const float *)gv + b * ldg;                  \
        float *hs = (float *)hv + b * ldh;                             \
        float *o = ov ? (float *)ov + b * ldo : NULL;                  \
        size_t j = 0;
#define MK_ROWS_END }

V_TARGET void MK_FN(lstm__)(size_t m, size_t h, const void *xv, size_t ldx, const void *gv,
                            size_t ldg, void *cv, size_t ldc, void *hv, size_t ldh, void *ov,
                            size_t ldo) {
    MK_ROWS_BEGIN
    float *c = (float *)cv + b * ldc;
    for (; j + V_W <= h; j += V_W)
        mk_v_lstm(x, g, c, hs, o, h, j, V_W);
    if (j < h)
        mk_v_lstm(x, g, c, hs, o, h, j, h - j);
    MK_ROWS_END
}

V_TARGET void MK_FN(gru__)(size_t m, size_t h, const void *xv, size_t ldx, const void *gv,
                           size_t ldg, void *cv, size_t ldc, void *hv, size_t ldh, void *ov,
                           size_t ldo) {
    (void)cv;
    (void)ldc;
    MK_ROWS_BEGIN
    for (; j + V_W <= h; j += V_W)
        mk_v_gru(x, g, hs, o, h, j, V_W);
    if (j < h)
        mk_v_gru(x, g, hs, o, h, j, h - j);
    MK_ROWS_END
}

V_TARGET void MK_FN(tanh__)(size_t m, size_t h, const void *xv, size_t ldx, const void *gv,
                            size_t ldg, void *cv, size_t ldc, void *hv, size_t ldh, void *ov,
                            size_t ldo) {
    (void)cv;
    (void)ldc;
    MK_ROWS_BEGIN
    for (; j + V_W <= h; j += V_W)
        mk_v_simple(x, g, hs, o, j, V_W, 0);
    if (j < h)
        mk_v_simple(x, g, hs, o, j, h - j, 0);
    MK_ROWS_END
}

V_TARGET void MK_FN(relu__)(size_t m, size_t h, const void *xv, size_t ldx, const void *gv,
                            size_t ldg, void *cv, size_t ldc, void *hv, size_t ldh, void *ov,
                            size_t ldo) {
    (void)cv;
    (void)ldc;
    MK_ROWS_BEGIN
    for (; j + V_W <= h; j += V_W)
        mk_v_simple(x, g, hs, o, j, V_W, 1);
    if (j < h)
        mk_v_simple(x, g, hs, o, j, h - j, 1);
    MK_ROWS_END
}

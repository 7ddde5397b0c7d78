/* The recurrent cells of rnn.h, written once against common's vector vocabulary (VM_*, listed
 * in common/vmath.inc.h) and instantiated by rnn-cell-scalar.c (one float; one double),
 * f32-rnn-cell-avx2.c (8 floats) and f32-rnn-cell-avx512.c (16 floats). The including file
 * includes a vocabulary (common/vops-*.h) and defines MK_RNN_FN(kind), the entry points' names
 * (undefined here at the end), and ends the vocabulary after it (common/vmath-undef.h).
 *
 * The gates' sigmoid and tanh are common/act.h's (VM_FN(act)): in float32 the one math of
 * common/vmath.inc.h, so the cells give the same bits on every ISA path, and the same as
 * nn.functional's sigmoid and tanh; in float64 the libm reference. Each row runs whole vectors,
 * then one partial vector for its last h % VM_W lanes. */

#define MK_RNN_LD(p) (n == VM_W ? VM_LOAD(p) : VM_LOADN((p), n))
#define MK_RNN_ST(p, v)                \
    do {                               \
        if (n == VM_W)                 \
            VM_STORE((p), (v));        \
        else                           \
            VM_STOREN((p), (v), n);    \
    } while (0)
#define MK_RNN_ACT(v, code) VM_FN(act)((v), (code), 0, 0)
/* the sum of gate block k's pre-activations x and g (blocks gs apart) */
#define MK_RNN_GATE(k) VM_ADD(MK_RNN_LD(x + (k) * gs + j), MK_RNN_LD(g + (k) * gs + j))

/* lanes [j, j + n) of one row of a kind's cell, n <= VM_W (c: the LSTM's cell state only) */
VM_ATTR void VM_FN(rnn_lanes)(int kind, const VM_ELEM *x, const VM_ELEM *g, VM_ELEM *c,
                              const VM_ELEM *hp, VM_ELEM *hs, VM_ELEM *o, size_t gs, size_t j,
                              size_t n) {
    VM_T hn;
    switch (kind) {
        case MK_RNN_LSTM: {
            const VM_T ig = MK_RNN_ACT(MK_RNN_GATE(0), MK_ACT_SIGMOID);
            const VM_T fg = MK_RNN_ACT(MK_RNN_GATE(1), MK_ACT_SIGMOID);
            const VM_T gg = MK_RNN_ACT(MK_RNN_GATE(2), MK_ACT_TANH);
            const VM_T og = MK_RNN_ACT(MK_RNN_GATE(3), MK_ACT_SIGMOID);
            const VM_T cn = VM_FMA(fg, MK_RNN_LD(c + j), VM_MUL(ig, gg));
            MK_RNN_ST(c + j, cn);
            hn = VM_MUL(og, MK_RNN_ACT(cn, MK_ACT_TANH));
            break;
        }
        case MK_RNN_GRU: {
            const VM_T r = MK_RNN_ACT(MK_RNN_GATE(0), MK_ACT_SIGMOID);
            const VM_T z = MK_RNN_ACT(MK_RNN_GATE(1), MK_ACT_SIGMOID);
            const VM_T nn = MK_RNN_ACT(VM_FMA(r, MK_RNN_LD(g + 2 * gs + j),
                                              MK_RNN_LD(x + 2 * gs + j)), MK_ACT_TANH);
            hn = VM_FMA(z, VM_SUB(MK_RNN_LD(hp + j), nn), nn);
            break;
        }
        default: /* MK_RNN_TANH, MK_RNN_RELU */
            hn = MK_RNN_ACT(MK_RNN_GATE(0), kind == MK_RNN_RELU ? MK_ACT_RELU : MK_ACT_TANH);
            break;
    }
    MK_RNN_ST(hs + j, hn);
    if (o)
        MK_RNN_ST(o + j, hn);
}

/* the cell of one kind over m rows (rnn.h's arguments) */
VM_ATTR void VM_FN(rnn_rows)(int kind, size_t m, size_t w, size_t gs, const void *xv,
                             size_t ldx, const void *gv, size_t ldg, void *cv, size_t ldc,
                             const void *pv, size_t ldp, void *hv, size_t ldh, void *ov,
                             size_t ldo) {
    for (size_t b = 0; b < m; b++) {
        const VM_ELEM *x = (const VM_ELEM *)xv + b * ldx;
        const VM_ELEM *g = (const VM_ELEM *)gv + b * ldg;
        VM_ELEM *c = cv ? (VM_ELEM *)cv + b * ldc : NULL;
        const VM_ELEM *hp = (const VM_ELEM *)pv + b * ldp;
        VM_ELEM *hs = (VM_ELEM *)hv + b * ldh;
        VM_ELEM *o = ov ? (VM_ELEM *)ov + b * ldo : NULL;
        size_t j = 0;
        for (; j + VM_W <= w; j += VM_W)
            VM_FN(rnn_lanes)(kind, x, g, c, hp, hs, o, gs, j, VM_W);
        if (j < w)
            VM_FN(rnn_lanes)(kind, x, g, c, hp, hs, o, gs, j, w - j);
    }
}

#define MK_RNN_ENTRY(kind, KIND)                                                             \
    VM_TARGET void MK_RNN_FN(kind)(size_t m, size_t w, size_t gs, const void *x, size_t ldx, \
                                   const void *g, size_t ldg, void *c, size_t ldc,           \
                                   const void *hp, size_t ldp, void *hs, size_t ldh,         \
                                   void *o, size_t ldo) {                                    \
        VM_FN(rnn_rows)(KIND, m, w, gs, x, ldx, g, ldg, c, ldc, hp, ldp, hs, ldh, o, ldo);   \
    }
MK_RNN_ENTRY(lstm, MK_RNN_LSTM)
MK_RNN_ENTRY(gru, MK_RNN_GRU)
MK_RNN_ENTRY(tanh, MK_RNN_TANH)
MK_RNN_ENTRY(relu, MK_RNN_RELU)

#undef MK_RNN_ENTRY
#undef MK_RNN_FN
#undef MK_RNN_GATE
#undef MK_RNN_ACT
#undef MK_RNN_ST
#undef MK_RNN_LD

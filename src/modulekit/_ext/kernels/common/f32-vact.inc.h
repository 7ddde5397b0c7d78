/* One ISA's f32-vact row function: y = act(x) over n floats, whole vectors then one partial
 * vector, one loop per activation (the switch stays outside the loops). The including file
 * includes the ISA's math (common/vmath-*.h) and vocabulary (common/vops-*.h), defines
 * MK_VACT_NAME (the function's name, undefined here at the end) and ends the vocabulary
 * after it (common/vmath-undef.h). */
VM_TARGET void MK_VACT_NAME(size_t n, const float *x, float *y, int act, float lo, float hi) {
    size_t i = 0;
#define MK_VACT_LOOP(FN)                                                                  \
    for (; i + VM_W <= n; i += VM_W) VM_STORE(y + i, FN(VM_LOAD(x + i)));                 \
    if (i < n) VM_STOREN(y + i, FN(VM_LOADN(x + i, n - i)), n - i);
#define MK_VACT_CLAMP(v) VM_FN(act)((v), MK_ACT_CLAMP, lo, hi)
#define MK_VACT_RELU(v) VM_FN(act)((v), MK_ACT_RELU, 0.0f, 0.0f)
#define MK_VACT_RELU6(v) VM_FN(act)((v), MK_ACT_RELU6, 0.0f, 0.0f)
#define MK_VACT_CASE(CODE, FN) \
    case CODE:                 \
        MK_VACT_LOOP(FN)       \
        break;
    switch (act) {
        MK_VACT_CASE(MK_ACT_RELU, MK_VACT_RELU)
        MK_VACT_CASE(MK_ACT_CLAMP, MK_VACT_CLAMP)
        MK_VACT_CASE(MK_ACT_RELU6, MK_VACT_RELU6)
        MK_VACT_CASE(MK_ACT_HARDSWISH, VM_FN(hardswish))
        MK_VACT_CASE(MK_ACT_GELU_ERF, VM_FN(gelu_erf))
        MK_VACT_CASE(MK_ACT_GELU_TANH, VM_FN(gelu_tanh))
        MK_VACT_CASE(MK_ACT_SILU, VM_FN(silu))
        MK_VACT_CASE(MK_ACT_SIGMOID, VM_FN(sigmoid))
        MK_VACT_CASE(MK_ACT_TANH, VM_FN(tanh))
        default:
            if (x != y)
                for (; i < n; i++) y[i] = x[i];
            break;
    }
#undef MK_VACT_CASE
#undef MK_VACT_CLAMP
#undef MK_VACT_RELU
#undef MK_VACT_RELU6
#undef MK_VACT_LOOP
}
#undef MK_VACT_NAME

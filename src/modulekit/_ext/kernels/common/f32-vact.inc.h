/* The body of one ISA's f32-vact row function: y = act(x) over n floats, one loop per
 * activation (the switch stays outside the loops). The including file defines
 * MK_VACT_LOOP(FN) (the loop over x/y/n/i applying FN to one vector, masked tail included),
 * VM_FN(name) (its vmath instantiation's names) and the function's signature around it. */
    size_t i = 0;
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

# The activations of every kernel family (kernels/common/act.h): one enum and the element-wise
# entry points, cimported by _gemm, _conv and _ops (declarations only: no module of its own).
cdef extern from "common/act.h" nogil:
    ctypedef enum mk_act:
        MK_ACT_NONE
        MK_ACT_RELU
        MK_ACT_CLAMP
        MK_ACT_RELU6
        MK_ACT_HARDSWISH
        MK_ACT_GELU_ERF
        MK_ACT_GELU_TANH
        MK_ACT_SILU
        MK_ACT_SIGMOID
        MK_ACT_TANH
        MK_ACT_COUNT
    void mk_act_f32(int isa, size_t n, const float *x, float *y, int act, float lo, float hi,
                    int nthreads)
    void mk_act_f64(size_t n, const double *x, double *y, int act, double lo, double hi,
                    int nthreads)

# Group normalisation (kernels/norm): C declarations for other Cython modules.
# The C functions only compute; validate shapes, strides and dtypes (as _norm.pyx does) first.

cdef extern from "norm/norm.h" nogil:
    ctypedef struct mk_norm_config:
        const char *name
    const mk_norm_config *mk_norm_config_for(int isa)
    size_t mk_norm_streaming_min_bytes()
    size_t mk_norm_set_streaming_min_bytes(size_t bytes)
    void mk_groupnorm_f32(int isa, size_t n, size_t c, size_t s, size_t groups, const float *x,
                          const float *gamma, const float *beta, double eps, float *y,
                          double *mean, double *rstd, int nthreads)
    void mk_groupnorm_f64(size_t n, size_t c, size_t s, size_t groups, const double *x,
                          const double *gamma, const double *beta, double eps, double *y,
                          double *mean, double *rstd, int nthreads)

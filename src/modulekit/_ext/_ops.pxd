# Row-wise transformer ops (kernels/ops): C declarations for other Cython modules.
# The C functions only compute; validate shapes, strides and dtypes (as _ops.pyx does) first.
from libc.stdint cimport int64_t, uint16_t

cdef extern from "ops/ops.h" nogil:
    enum:
        MK_TABLE_F32
        MK_TABLE_F64
        MK_TABLE_F16
        MK_TABLE_BF16
    void mk_layernorm_f32(int isa, size_t rows, size_t n, const float *x, size_t ldx,
                          const float *res, size_t ldr, const float *gamma, const float *beta,
                          float eps, float *y, size_t ldy, int nthreads)
    void mk_layernorm_f64(size_t rows, size_t n, const double *x, size_t ldx,
                          const double *res, size_t ldr, const double *gamma,
                          const double *beta, double eps, double *y, size_t ldy, int nthreads)
    void mk_softmax_f32(int isa, size_t na, size_t nb, size_t nc, size_t n, float *x,
                        ptrdiff_t sx0, ptrdiff_t sx1, ptrdiff_t sx2, const float *mask,
                        ptrdiff_t sm0, ptrdiff_t sm1, ptrdiff_t sm2, float scale, int nthreads)
    void mk_softmax_f64(size_t na, size_t nb, size_t nc, size_t n, double *x,
                        ptrdiff_t sx0, ptrdiff_t sx1, ptrdiff_t sx2, const double *mask,
                        ptrdiff_t sm0, ptrdiff_t sm1, ptrdiff_t sm2, double scale,
                        int nthreads)
    void mk_transpose(int isa, size_t esize, size_t batch, size_t rows, size_t cols,
                      const void *src, ptrdiff_t sb, ptrdiff_t sr, void *dst, ptrdiff_t db,
                      ptrdiff_t dr, int nthreads)
    void mk_scatter_phases(size_t esize, size_t outer, size_t cg, size_t nphase,
                           const void *src, const ptrdiff_t *M, const ptrdiff_t *w0,
                           const ptrdiff_t *cnt, void *dst, const ptrdiff_t *O,
                           const ptrdiff_t *o0, const ptrdiff_t *st, int nthreads)
    ptrdiff_t mk_ids_first_bad(const int64_t *ids, size_t n, int64_t rows)
    void mk_gather(int isa, int table_dtype, size_t n, size_t dim, const int64_t *ids,
                   const void *table, void *out, size_t ldo, int accumulate, int nthreads)
    void mk_embed3_layernorm_f32(int isa, size_t n, size_t dim, const int64_t *ids0,
                                 const float *t0, const int64_t *ids1, const float *t1,
                                 const int64_t *ids2, const float *t2, const float *gamma,
                                 const float *beta, float eps, float *out, int nthreads)
    int mk_attention_f32(int isa, int bf16, size_t nb, size_t nh, size_t lq, size_t lk,
                         size_t d, size_t dv, const float *q, ptrdiff_t qsb, ptrdiff_t qsr,
                         const float *k, ptrdiff_t ksb, ptrdiff_t ksr, const float *v,
                         ptrdiff_t vsb, ptrdiff_t vsr, const float *mask, ptrdiff_t msb,
                         ptrdiff_t msh, ptrdiff_t msr, float scale, float *out, ptrdiff_t osb,
                         ptrdiff_t osr, float *weights, int nthreads)
    int mk_attention_f64(size_t nb, size_t nh, size_t lq, size_t lk, size_t d, size_t dv,
                         const double *q, ptrdiff_t qsb, ptrdiff_t qsr, const double *k,
                         ptrdiff_t ksb, ptrdiff_t ksr, const double *v, ptrdiff_t vsb,
                         ptrdiff_t vsr, const double *mask, ptrdiff_t msb, ptrdiff_t msh,
                         ptrdiff_t msr, double scale, double *out, ptrdiff_t osb, ptrdiff_t osr,
                         double *weights, int nthreads)

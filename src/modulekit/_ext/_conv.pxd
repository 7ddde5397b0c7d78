# Declarations of the convolution / pooling C kernels (kernels/conv/conv.h).
cimport numpy as cnp
from libc.stdint cimport uint32_t

cdef extern from "conv/conv.h" nogil:
    enum:
        MK_CONV_MR
        MK_W_F32
        MK_W_F16
        MK_W_BF16

    ctypedef struct mk_conv_geom:
        int N, C, H, W
        Py_ssize_t sn, sc, sh, sw
        int KH, KW
        int sy, sx
        int pt, pl, pb, pr
        int dy, dx
        int OH, OW
        int Hq, Wq
        Py_ssize_t plane

    void mk_conv_geometry(mk_conv_geom *g)
    Py_ssize_t mk_conv_phase_size(const mk_conv_geom *g, int channels)
    int mk_conv2d_f32(const mk_conv_geom *g, const float *x, int groups, int Cout,
                      const void *packed, int wtype, float *wide, float *phase,
                      Py_ssize_t *koff, float *out, const float *res, int act, int isa,
                      int nthreads)
    ctypedef struct mk_conv_blocks:
        int nblocks
        const Py_ssize_t *shift
        const Py_ssize_t *origin
        const int *count
        Py_ssize_t ns, cs, rs
        int sy, sx
    int mk_conv2d_shifted_f32(const mk_conv_geom *g, const float *x, int Cout,
                              const void *packed, int wtype, float *wide, float *phase,
                              Py_ssize_t *koff, const mk_conv_blocks *blocks, float *out,
                              int isa, int nthreads)
    void mk_conv2d_f64(const mk_conv_geom *g, const double *x, int groups, int Cout,
                       const double *w, const double *bias, double *out, const double *res,
                       int act, int nthreads)
    # the configuration: each call's algorithm (conv-config.c)
    enum:
        MK_W_F64
        MK_CONV_FORCE_AUTO
        MK_CONV_FORCE_IGEMM
        MK_CONV_FORCE_IM2COL
    enum:  # mk_conv_algo
        MK_CONV_ALGO_F64
        MK_CONV_ALGO_DEPTHWISE
        MK_CONV_ALGO_WINOGRAD
        MK_CONV_ALGO_IM2COL
        MK_CONV_ALGO_ROWS
        MK_CONV_ALGO_1X1
        MK_CONV_ALGO_IGEMM
        MK_CONV_ALGO_BF16
        MK_CONV_ALGO_BF16_ROWS
    ctypedef struct mk_conv_config:
        const char *name
        int lane_exact
    const mk_conv_config *mk_conv_get_config(int isa)
    ctypedef struct mk_igemm_tiling:
        int nr, tail_nr
        Py_ssize_t lanes
        int vector
    double mk_conv_igemm_grid_tiling(int isa, const mk_conv_geom *g, mk_igemm_tiling *t)
    ctypedef struct mk_conv_layer:
        int groups, Cout, wtype, depthwise, force, bf16
    ctypedef struct mk_conv_choice:
        int algo, wino_m, wino_eng, direct
    void mk_conv_choose(const mk_conv_layer *l, const mk_conv_geom *g, int isa, int nthreads,
                        mk_conv_choice *c)
    int mk_conv_maxpool_fused(const mk_conv_layer *l, const mk_conv_geom *g,
                              const mk_conv_geom *pg, int isa, int nthreads)
    # bfloat16 compute under "medium" (bf16-conv-pack.c, f32-conv-driver.c)
    size_t mk_bf16_conv_panels_words(int bf16, int groups, int cout_g, int cin_g, int taps)
    void mk_bf16_conv_pack_panels(int bf16, const void *packed, int wtype, int groups,
                                  int cout_g, int cin_g, int taps, uint32_t *dst)
    Py_ssize_t mk_conv_bf16_tiles_words(int bf16, const mk_conv_geom *g, int groups, int direct,
                                        int nthreads)
    int mk_conv2d_bf16(int bf16, const mk_conv_geom *g, const float *x, int groups, int Cout,
                       const uint32_t *w16, uint32_t *tiles, float *phase, Py_ssize_t *koff,
                       float *out, const float *res, int act, int nthreads)
    # Winograd F(m x m, 3 x 3) (f32-winograd-driver.c)
    int mk_conv_winograd_set_engine(int mode)
    ctypedef struct mk_wino_eng_api:
        pass
    void mk_wino_eng_install(const mk_wino_eng_api *api)
    size_t mk_wino_eng_bytes(int isa, int Cout, int Cin)
    void mk_wino_eng_pack(int isa, int T, int Cout, int Cin, const float *ut, int tbias,
                          const float *bias, void *dst)
    Py_ssize_t mk_conv_winograd_scratch(const mk_conv_geom *g, int Cout, int m, int isa,
                                        int nthreads, int eng)
    int mk_conv2d_winograd_f32(const mk_conv_geom *g, const float *x, int Cout, int m,
                               const float *u, int eng, float *scratch, float *out,
                               const float *res, int act, int isa, int nthreads)
    # end Winograd
    Py_ssize_t mk_dwconv_scratch(const mk_conv_geom *g)
    void mk_dwconv2d_f32(const mk_conv_geom *g, const float *x, const float *w,
                         const float *bias, float *scratch, float *out, const float *res,
                         int act, int isa, int nthreads)
    void mk_max_pool2d_f32(const mk_conv_geom *g, const float *x, float *out, int nthreads)
    void mk_max_pool2d_f64(const mk_conv_geom *g, const double *x, double *out, int nthreads)
    int mk_max_pool2d_f32_avx512(const mk_conv_geom *g, const float *x, float *out,
                                 int nthreads)
    # row bands with a band-sized phase buffer: few input channels, and conv + max pool
    # (f32-conv-driver.c)
    Py_ssize_t mk_conv_rows_scratch(int bf16, const mk_conv_geom *g, const mk_conv_geom *pg,
                                    int Cout, int nthreads)
    int mk_conv2d_rows_f32(const mk_conv_geom *g, const mk_conv_geom *pg, const float *x,
                           int Cout, const float *wp, float *scratch, Py_ssize_t *koff,
                           float *out, const float *res, int act, int isa, int nthreads)
    int mk_conv2d_rows_bf16(int bf16, const mk_conv_geom *g, const mk_conv_geom *pg,
                            const float *x, int Cout, const uint32_t *w16, float *scratch,
                            Py_ssize_t *koff, float *out, const float *res, int act,
                            int nthreads)
    void mk_avg_pool2d_f32(const mk_conv_geom *g, const float *x, float *out,
                           int count_include_pad, int divisor, int nthreads)
    void mk_avg_pool2d_f64(const mk_conv_geom *g, const double *x, double *out,
                           int count_include_pad, int divisor, int nthreads)
    void mk_adaptive_avg_pool2d_f32(const mk_conv_geom *g, const float *x, float *out,
                                    int nthreads)
    void mk_adaptive_avg_pool2d_f64(const mk_conv_geom *g, const double *x, double *out,
                                    int nthreads)
    void mk_scale_shift_f32(const mk_conv_geom *g, const float *x, const float *scale,
                            const float *shift, float *y, int act, int nthreads)
    void mk_scale_shift_f64(const mk_conv_geom *g, const double *x, const double *scale,
                            const double *shift, double *y, int act, int nthreads)

    # --- depthwise chain: [1x1] -> depthwise 3x3 -> 1x1 (f32-invres-driver.c) ---
    Py_ssize_t mk_invres_scratch(const mk_conv_geom *g, int chid, int has_expand, int R)
    int mk_invres_channel_split(const mk_conv_geom *g, int has_expand, int nthreads)
    void mk_invres_f32(const mk_conv_geom *g, const float *x, int chid, const float *wexp,
                       const float *wdw, const float *bdw, int cout, const float *wproj,
                       Py_ssize_t *koff, float *out, const float *res, float *scratch, int R,
                       int act_e, int act_d, int act_p, int nthreads)
    void mk_conv1x1_f32(int N, int K, Py_ssize_t HW, const float *x, Py_ssize_t sn,
                        Py_ssize_t sc, int M, const float *wp, Py_ssize_t *koff, float *out,
                        const float *res, int act, int nthreads)
    void mk_conv1x1_mean_f32(int N, int K, Py_ssize_t HW, const float *x, Py_ssize_t sn,
                             Py_ssize_t sc, int M, const float *wp, Py_ssize_t *koff,
                             float *out, const float *res, int act, float *mean, int nthreads)
    void mk_mean_rows_f32(const float *x, Py_ssize_t rows, Py_ssize_t L, float *mean)
    # small output maps: im2col + the lane-exact 1x1 GEMM (f32-conv-im2col.c)
    Py_ssize_t mk_conv_im2col_size(const mk_conv_geom *g)
    int mk_conv2d_im2col_f32(const mk_conv_geom *g, const float *x, int Cout, const float *wp,
                             float *col, Py_ssize_t *koff, float *out, const float *res,
                             int act, int nthreads)


cdef class PackedConv2d:
    cdef readonly int in_channels, out_channels, groups
    cdef readonly tuple kernel_size, stride, dilation, padding
    cdef readonly str storage          # 'float32' | 'float16' | 'bfloat16' | 'float64'
    cdef readonly bint depthwise
    cdef readonly bint has_bias
    cdef object _packed                # ndarray: panels, depthwise taps, or float64 weights
    cdef object _bias                  # ndarray or None (depthwise / float64 paths)
    cdef int _wtype
    # Winograd: algorithm choice ('auto', 'igemm', 'winograd-2x2', 'winograd-4x4') and the
    # lazily built transformed weights, {tile size: float32 panels}
    cdef str _algorithm
    cdef dict _wino
    # bfloat16 compute ("medium" on the AVX512-BF16 path): the pair panels, built at the first
    # such call (None before)
    cdef object _bf16
    cdef mk_conv_layer _layer(self)
    cdef mk_conv_choice _choose(self, mk_conv_geom *g, int isa, int nthreads)
    cdef _shape_geom(self, input_shape, mk_conv_geom *g)
    cdef tuple _geometry(self, x, mk_conv_geom *gp)
    cdef _run(self, mk_conv_geom *g, cnp.ndarray x, cnp.ndarray out, cnp.ndarray res, int act,
              float *mean=*)
    cdef _igemm(self, mk_conv_geom *g, void *xp, void *op, void *rp, int act, bint direct,
                int isa, int nthreads)
    cdef _rows(self, mk_conv_geom *g, mk_conv_geom *pg, void *xp, void *op, void *rp, int act,
               int path, int isa, int nthreads)
    cdef cnp.ndarray _bf16_panels(self, int path)
    cdef _igemm_bf16(self, mk_conv_geom *g, void *xp, void *op, void *rp, int act,
                     bint direct, int nthreads)
    cdef _forward(self, x, activation, residual, bint want_mean)

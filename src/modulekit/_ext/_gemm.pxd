# The packed GEMM engine (kernels/gemm): C declarations and the PackedLinear type, for other
# Cython modules (convolution as im2col / indirect GEMM, attention) to cimport.
#
# Use from Cython, with the GIL held for the first two steps:
#     from modulekit._ext._gemm cimport PackedLinear, mk_epilogue, make_epilogue
#     cdef mk_epilogue ep
#     make_epilogue("relu", 0.0, 0.0, &ep)         # validates, raises ValueError
#     packed.ensure_ready()                          # (re)packs for the active ISA if needed,
#                                                    # and for bfloat16 under "medium" precision
#     with nogil:
#         rc = packed.gemm(m, a, rsa, csa, c, ldc, &ep, nthreads)   # 0, or -1: out of memory
# a: M x K activations in the compute dtype (element (i, k) at a[i * rsa + k * csa], strides
# in elements, any sign); c: M x N output rows of stride ldc elements, unit column stride.

cdef extern from "wino-eng-api.h" nogil:
    ctypedef struct mk_wino_eng_api:
        pass

cdef extern from "gemm/gemm.h" nogil:
    const mk_wino_eng_api mk_gemm_wino_api
    ctypedef enum mk_compute:
        MK_COMPUTE_F32
        MK_COMPUTE_F64
    ctypedef enum mk_storage:
        MK_STORAGE_F32
        MK_STORAGE_F64
        MK_STORAGE_F16
        MK_STORAGE_BF16
    ctypedef struct mk_epilogue:
        int act
        float lo32
        float hi32
        double lo
        double hi
    ctypedef struct mk_gemm_config:
        const char *name
        int isa
        int compute
        int storage
        size_t mr, nr, kc, mc, nc
        size_t esize, wsize
        size_t kpad, asize

    const mk_gemm_config *mk_gemm_get_config(int compute, int storage, int isa)
    # bfloat16 compute and the float32 matmul precision (gemm.h)
    ctypedef enum mk_precision:
        MK_PREC_HIGHEST
        MK_PREC_HIGH
        MK_PREC_MEDIUM
    const mk_gemm_config *mk_gemm_get_bf16_config(int bf16_isa)
    int mk_gemm_precision()
    void mk_gemm_set_precision(int p)
    int mk_gemm_get_global_precision()
    int mk_gemm_set_thread_precision(int p)
    size_t mk_gemm_panel_stride(const mk_gemm_config *cfg, size_t k)
    size_t mk_gemm_packed_size(const mk_gemm_config *cfg, size_t n, size_t k)
    void mk_gemm_pack(const mk_gemm_config *cfg, size_t n, size_t k, const void *b,
                      ptrdiff_t rs, ptrdiff_t cs, const void *bias, void *dst,
                      int nthreads)
    void mk_gemm_unpack(const mk_gemm_config *cfg, size_t n, size_t k, const void *packed,
                        void *weight, void *bias)
    int mk_gemm_run(const mk_gemm_config *cfg, size_t m, size_t n, size_t k, const void *a,
                    ptrdiff_t rsa, ptrdiff_t csa, const void *packed, void *c, size_t ldc,
                    const mk_epilogue *ep, int nthreads)
    int mk_gemm_plan_threads(const mk_gemm_config *cfg, size_t m, size_t n, size_t k,
                             int nthreads)
    void mk_gemm_warm_threads(int nthreads)
    int mk_gemm_matmul(const mk_gemm_config *cfg, size_t m, size_t n, size_t k, const void *a,
                       ptrdiff_t rsa, ptrdiff_t csa, const void *b, ptrdiff_t rsb,
                       ptrdiff_t csb, void *c, size_t ldc, int nthreads)
    ctypedef struct mk_gemm_chain_layer:
        const mk_gemm_config *cfg
        size_t n, k
        const void *packed
        mk_epilogue ep
    int mk_gemm_set_rowdirect(int on)
    ctypedef void (*mk_gemm_step_fn)(void *ctx, size_t s, size_t m, size_t u0, size_t u1,
                                     const void *prev, void *next) noexcept nogil
    ctypedef struct mk_gemm_recurrence:
        const mk_gemm_config *cfg
        const void *packed
        const mk_epilogue *ep
        size_t gates, h, steps
        const size_t *rows
        void *state
        void *spare
        void *g
        mk_gemm_step_fn step
        void *ctx
    int mk_gemm_recurrence_run(const mk_gemm_recurrence *r, int nthreads)
    int mk_gemm_chain_plan_threads(size_t nl, const mk_gemm_chain_layer *layers, size_t m,
                                   int nthreads)
    int mk_gemm_chain_run(size_t nl, const mk_gemm_chain_layer *layers, size_t m, const void *a,
                          ptrdiff_t lda, void *c, void *buf0, void *buf1, int nthreads)


# Fill *ep for an activation name ("none", "relu", "relu6", "clamp", "gelu", "gelu_tanh",
# "silu", "sigmoid", "tanh"); alpha/beta are clamp's min/max. Raises ValueError.
cdef int make_epilogue(object activation, double alpha, double beta,
                       mk_epilogue *ep) except -1


cdef class PackedLinear:
    cdef readonly Py_ssize_t in_features
    cdef readonly Py_ssize_t out_features
    cdef readonly str storage
    cdef readonly object compute_dtype
    cdef readonly bint has_bias
    cdef int _compute
    cdef int _storage
    cdef int _typenum                  # NumPy type number of the compute dtype
    cdef const mk_gemm_config *_cfg    # configuration the buffer is packed for
    cdef void *_packed                 # 64-byte aligned packed panels (owned unless _shm)
    cdef size_t _packed_size
    cdef list _retired                 # buffers replaced by a re-pack (freed at dealloc)
    cdef object _shm                   # uint8 ndarray over the shared segment holding
                                       # _packed (share_memory), or None: _packed is malloc'd
    # bfloat16 compute (precision "medium"): a second buffer in the bf16 layout, packed once
    # at the first such forward and kept (private: never shared or pickled)
    cdef const mk_gemm_config *_cfg16
    cdef void *_packed16
    cdef size_t _packed16_size
    cdef int ensure_bf16(self) except -1
    cdef const mk_gemm_config *_bf16_now(self) noexcept nogil

    cdef int _pack(self, const mk_gemm_config *cfg, object w, object b) except -1
    cdef object _check_out(self, object out, Py_ssize_t m, object x)
    cdef int ensure_ready(self) except -1
    cdef PackedLinear _like(self)
    cdef int gemm(self, size_t m, const void *a, ptrdiff_t rsa, ptrdiff_t csa, void *c,
                  size_t ldc, const mk_epilogue *ep, int nthreads) noexcept nogil
    cdef int recurrence(self, mk_gemm_recurrence *r, int nthreads) noexcept nogil


# Consecutive PackedLinear layers with their epilogues, run as one kernel call
# (kernels/gemm/gemm-chain.c); create with linear_chain().
cdef class PackedChain:
    cdef readonly tuple layers          # the PackedLinear objects, first to last
    cdef readonly tuple activations     # (name, alpha, beta) per layer
    cdef tuple _sources                 # the activations as given (identity fast check)
    cdef object _owner                  # watched container (_watch), or None
    cdef tuple _children                # its children when the chain was planned
    cdef tuple _modules                 # watched modules (_watch), or None
    cdef tuple _linears
    cdef tuple _acts
    cdef tuple _act_static              # per layer: its activation's epilogue is a class tuple
    cdef readonly Py_ssize_t in_features
    cdef readonly Py_ssize_t out_features
    cdef readonly object compute_dtype
    cdef int _compute
    cdef int _typenum
    cdef Py_ssize_t _nl
    cdef Py_ssize_t _mid                # widest intermediate result (elements per row)
    cdef mk_gemm_chain_layer *_spec     # per layer: config, sizes, packed buffer, epilogue
    cdef void *_buf                     # two ping-pong buffers of _buf_half bytes (owned)
    cdef size_t _buf_half
    cdef bint _busy                     # _buf in use by a call (a concurrent one allocates)

    cdef int _refresh(self) except -1
    cdef object _run(self, object x)
    cdef object _run_spec(self, object x, mk_gemm_chain_layer *spec)

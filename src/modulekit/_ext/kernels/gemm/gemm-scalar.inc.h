/* Template of the portable C microkernel (see mk_gemm_ukernel in gemm.h), compiled with the
 * baseline flags (the compiler may vectorise the NR loops with SSE2). Parameters, undefined
 * at the end: MK_FN, MK_MR, MK_NR, MK_CT (compute type), MK_WT (storage type),
 * MK_WCVT(x) (storage -> compute), MK_ACT_SCALAR(x, ep) (transcendental activation). */

void MK_FN(size_t mr, size_t nc, size_t kc, const void *a_, const void *w_, void *c_, size_t ldc,
           const void *init_, const mk_epilogue *ep) {
    const MK_CT *restrict a = (const MK_CT *)a_; /* in: packed A, a[k * MK_MR + i] */
    const MK_WT *restrict w = (const MK_WT *)w_; /* in: kc x MK_NR weights */
    MK_CT *restrict c = (MK_CT *)c_;             /* in/out: mr x nc tile */
    MK_CT acc[MK_MR][MK_NR];

    for (size_t i = 0; i < MK_MR; i++) {
        if (init_ != NULL) {
            for (size_t j = 0; j < MK_NR; j++) acc[i][j] = ((const MK_CT *)init_)[j];
        } else {
            const MK_CT *row = c + (i < mr ? i : mr - 1) * ldc;
            for (size_t j = 0; j < MK_NR; j++) acc[i][j] = j < nc ? row[j] : (MK_CT)0;
        }
    }
    for (size_t k = 0; k < kc; k++) {
        MK_CT wv[MK_NR];
        for (size_t j = 0; j < MK_NR; j++) wv[j] = MK_WCVT(w[j]);
        for (size_t i = 0; i < MK_MR; i++) {
            const MK_CT ai = a[i];
            for (size_t j = 0; j < MK_NR; j++) acc[i][j] += ai * wv[j];
        }
        a += MK_MR;
        w += MK_NR;
    }
    for (size_t i = 0; i < mr; i++) {
        MK_CT *row = c + i * ldc;
        for (size_t j = 0; j < nc; j++) {
            MK_CT x = acc[i][j];
            if (ep != NULL && ep->act != MK_ACT_NONE) x = MK_ACT_SCALAR(x, ep);
            row[j] = x;
        }
    }
}

#undef MK_FN
#undef MK_MR
#undef MK_NR
#undef MK_CT
#undef MK_WT
#undef MK_WCVT

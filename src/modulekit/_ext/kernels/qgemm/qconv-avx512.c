/* AVX-512 kernels of the static int8 convolutions (qconv-driver.c): the row quantizer of the
 * NCHW -> NHWC input conversion, and the im2col gather.
 *
 * The im2col gather (mk_qconv_im2col_fn, qgemm.h): each run of
 * contiguous input bytes (a window row's kw pixels when they are all inside the image, else
 * one pixel's channels) is copied in 64-byte pieces (the source read masked, the last piece
 * stored whole where the row has room, else masked), and so are the zero-point fills: no
 * per-byte loops and no libc call per run; the bytes a run's last piece writes past it are
 * rewritten by the runs after it or lie in the row's k padding. Output pixels are
 * walked incrementally (no divisions per row). Bit-identical to mk_qconv_im2col__scalar. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */
#include <immintrin.h>

#include "qgemm.h"
#include "qgemm-epilogue-avx512.h"

#define MK_T MK_QEPI_TARGET

static inline __mmask64 bytes_mask(size_t n) {
    return n >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << n) - 1);
}

/* n bytes from s to d, where the row has room bytes from d on (the bytes past n up to the
 * next 64-byte piece may be overwritten: the run after this one, written later, or the row's
 * k padding, which meets zero weights); the source is read masked (never past its run) */
MK_T static inline void copy_run(uint8_t *d, const uint8_t *s, size_t n, size_t room) {
    for (; n > 64; n -= 64, room -= 64, d += 64, s += 64)
        _mm512_storeu_si512(d, _mm512_loadu_si512(s));
    const __m512i v = _mm512_maskz_loadu_epi8(bytes_mask(n), s);
    if (room >= 64)
        _mm512_storeu_si512(d, v);
    else
        _mm512_mask_storeu_epi8(d, bytes_mask(n), v);
}

MK_T static inline void fill_run(uint8_t *d, __m512i v, size_t n, size_t room) {
    for (; n > 64; n -= 64, room -= 64, d += 64) _mm512_storeu_si512(d, v);
    if (room >= 64)
        _mm512_storeu_si512(d, v);
    else
        _mm512_mask_storeu_epi8(d, bytes_mask(n), v);
}

MK_T void mk_qconv_im2col__avx512(const mk_qconv_geom *g, const uint8_t *x, uint8_t zp,
                                  size_t r0, size_t rows, uint8_t *buf, size_t lda) {
    const size_t c = g->cin, span = g->kw * c;
    const __m512i vzp = _mm512_set1_epi8((char)zp);
    size_t ox = r0 % g->ow, oy = r0 / g->ow % g->oh, b = r0 / g->ow / g->oh;
    for (size_t i = 0; i < rows; i++) {
        uint8_t *dst = buf + i * lda;
        const ptrdiff_t x0 = (ptrdiff_t)(ox * g->sw) - (ptrdiff_t)g->pw;
        const int row_inside = x0 >= 0 && (size_t)x0 + (g->kw - 1) * g->dw < g->w;
        for (size_t ky = 0; ky < g->kh; ky++) {
            const ptrdiff_t iy = (ptrdiff_t)(oy * g->sh + ky * g->dh) - (ptrdiff_t)g->ph;
            uint8_t *d = dst + ky * span;
            if (iy < 0 || (size_t)iy >= g->h) {
                fill_run(d, vzp, span, lda - ky * span);
                continue;
            }
            const uint8_t *src = x + ((b * g->h + (size_t)iy) * g->w) * c;
            if (row_inside && g->dw == 1) { /* the kw pixels are contiguous */
                copy_run(d, src + (size_t)x0 * c, span, lda - ky * span);
                continue;
            }
            for (size_t kx = 0; kx < g->kw; kx++) {
                const ptrdiff_t ix = x0 + (ptrdiff_t)(kx * g->dw);
                if (ix < 0 || (size_t)ix >= g->w)
                    fill_run(d + kx * c, vzp, c, lda - ky * span - kx * c);
                else
                    copy_run(d + kx * c, src + (size_t)ix * c, c, lda - ky * span - kx * c);
            }
        }
        if (++ox == g->ow) { /* the next output pixel */
            ox = 0;
            if (++oy == g->oh) {
                oy = 0;
                b++;
            }
        }
    }
}

/* q[i] = mk_qu8_requantize(x[i], inv, zp) for i < n, 16 at a time (mk_qu8_requantize16). */
MK_T void mk_qu8_quantize_row__avx512(size_t n, const float *x, float inv, int32_t zp,
                                      uint8_t *q) {
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        _mm_mask_storeu_epi8(q + i, m,
                             mk_qu8_requantize16(_mm512_maskz_loadu_ps(m, x + i), inv, zp));
    }
}

#endif /* MK_X86 */

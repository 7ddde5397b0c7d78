/* Run-time CPU detection: CPUID feature bits AND the operating system's register-state
 * support (XCR0), so a kernel is only chosen when both the CPU and the OS allow it. */
#include "isa.h"

#if MK_X86
#include <cpuid.h>

static unsigned long long mk_xgetbv0(void) {
    unsigned int eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

typedef struct {
    int avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512dq, avx512bf16, os_avx, os_avx512;
} mk_cpu_flags;

static mk_cpu_flags mk_cpu_read(void) {
    mk_cpu_flags f = {0};
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    int osxsave = (c >> 27) & 1;
    f.fma = (c >> 12) & 1;
    f.f16c = (c >> 29) & 1;
    int avx = (c >> 28) & 1;
    if (osxsave && avx) {
        unsigned long long xcr0 = mk_xgetbv0();
        f.os_avx = (xcr0 & 0x6) == 0x6;            /* XMM and YMM state */
        f.os_avx512 = f.os_avx && (xcr0 & 0xE0) == 0xE0; /* opmask, ZMM_Hi256, Hi16_ZMM */
    }
    if (__get_cpuid_max(0, 0) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        f.avx2 = (b >> 5) & 1;
        f.avx512f = (b >> 16) & 1;
        f.avx512dq = (b >> 17) & 1;
        f.avx512bw = (b >> 30) & 1;
        f.avx512vl = (b >> 31) & 1;
        __cpuid_count(7, 1, a, b, c, d);
        f.avx512bf16 = (a >> 5) & 1;
    }
    return f;
}

mk_isa mk_isa_detect(void) {
    mk_cpu_flags f = mk_cpu_read();
    if (!(f.os_avx && f.avx2 && f.fma && f.f16c)) return MK_ISA_GENERIC;
    if (f.os_avx512 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq) return MK_ISA_AVX512;
    return MK_ISA_AVX2;
}

int mk_cpu_has_avx512bf16(void) {
    mk_cpu_flags f = mk_cpu_read();
    return f.os_avx512 && f.avx512f && f.avx512bf16;
}

#else /* not x86 */

mk_isa mk_isa_detect(void) { return MK_ISA_GENERIC; }
int mk_cpu_has_avx512bf16(void) { return 0; }

#endif

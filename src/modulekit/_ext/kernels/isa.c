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

/* ---- bfloat16 compute paths (see isa.h) */
#include <stdlib.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define MK_ARCH_GET_XCOMP_PERM 0x1022
#define MK_ARCH_REQ_XCOMP_PERM 0x1023
#define MK_XFEATURE_XTILEDATA 18

static int mk_amx_state = 2; /* 2: not asked yet */

static int mk_amx_request(void) {
    unsigned int a, b, c, d;
    if (__get_cpuid_max(0, 0) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    const int amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
    if (!amx_bf16 || !amx_tile || !mk_cpu_has_avx512bf16()) return 0;
    /* the OS must manage the tile state: XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA) */
    if ((mk_xgetbv0() & 0x60000ULL) != 0x60000ULL) return 0;
    /* test hook: behave as a kernel that refuses the request (tests/test_bf16.py) */
    const char *deny = getenv("MODULEKIT_TEST_AMX_REFUSED");
    if (deny != NULL && deny[0] != '\0' && deny[0] != '0') return -1;
#if defined(__linux__) && defined(SYS_arch_prctl)
    if (syscall(SYS_arch_prctl, MK_ARCH_REQ_XCOMP_PERM, MK_XFEATURE_XTILEDATA) != 0) return -1;
    unsigned long long perm = 0;
    if (syscall(SYS_arch_prctl, MK_ARCH_GET_XCOMP_PERM, &perm) != 0) return -1;
    return (perm >> MK_XFEATURE_XTILEDATA) & 1 ? 1 : -1;
#else
    return -1; /* no way to ask this OS for the tile state */
#endif
}

int mk_amx_status(void) {
    int s = __atomic_load_n(&mk_amx_state, __ATOMIC_ACQUIRE);
    if (s == 2) {
        s = mk_amx_request();
        __atomic_store_n(&mk_amx_state, s, __ATOMIC_RELEASE);
    }
    return s;
}

int mk_bf16_detect(void) {
    if (mk_isa_detect() < MK_ISA_AVX512 || !mk_cpu_has_avx512bf16()) return 0;
    return mk_amx_status() == 1 ? 2 : 1;
}

/* AMD's vdpbf16ps runs on both 512-bit pipes (Zen 5) or double-pumped at the rate of one
 * float32 FMA pair (Zen 4): twice the float32 multiply-adds. Intel runs it on one port only,
 * at or below the float32 FMA rate (measured on a Sapphire Rapids-class Xeon: 86-97 GFLOP/s
 * against 143-148 for float32, one thread), so there AVX512-BF16 alone does not pay. */
static int mk_cpu_is_amd(void) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
    return b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u; /* "AuthenticAMD" */
}

int mk_bf16_default(void) {
    const int best = mk_bf16_detect();
    if (best == 2) return 2;
    return best == 1 && mk_cpu_is_amd() ? 1 : 0;
}

#else /* not x86 */

int mk_bf16_detect(void) { return 0; }
int mk_bf16_default(void) { return 0; }
int mk_amx_status(void) { return 0; }

mk_isa mk_isa_detect(void) { return MK_ISA_GENERIC; }
int mk_cpu_has_avx512bf16(void) { return 0; }

#endif

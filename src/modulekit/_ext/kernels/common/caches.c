/* Cache detection (see caches.h). */
#include "common/caches.h"

#include <stdio.h>
#include <string.h>
#ifdef __linux__
#include <unistd.h> /* sysconf */
#endif

/* the reference machine (Zen 5: 48 KiB L1d, 1 MiB L2, 32 MiB L3) */
static const mk_caches reference = {48u << 10, MK_REF_L2_BYTES, 32u << 20};

static mk_caches detected;
static int ready; /* 0: not yet; read and written with atomics (the values are the same for
                     every thread that detects them, so a race only detects twice) */

/* sysfs: cpu0's data and unified caches by level ("48K", "2048K", "260M" sizes) */
static void from_sysfs(mk_caches *c) {
#ifdef __linux__
    char path[96], buf[32];
    for (int i = 0; i < 8; i++) {
        int level = 0;
        size_t size = 0;
        char type[16] = "";
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (f == NULL) break;
        if (fscanf(f, "%d", &level) != 1) level = 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        if ((f = fopen(path, "r")) != NULL) {
            if (fscanf(f, "%15s", type) != 1) type[0] = 0;
            fclose(f);
        }
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if ((f = fopen(path, "r")) != NULL) {
            unsigned long v = 0;
            char unit = 0;
            if (fgets(buf, sizeof buf, f) != NULL && sscanf(buf, "%lu%c", &v, &unit) >= 1)
                size = (size_t)v << (unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 0);
            fclose(f);
        }
        if (size == 0 || strcmp(type, "Instruction") == 0) continue;
        if (level == 1) c->l1d = size;
        else if (level == 2) c->l2 = size;
        else if (level >= 3 && size > c->l3) c->l3 = size;
    }
#else
    (void)c;
#endif
}

static void from_sysconf(mk_caches *c) {
#if defined(__linux__) && defined(_SC_LEVEL2_CACHE_SIZE)
    long v;
    if (c->l1d == 0 && (v = sysconf(_SC_LEVEL1_DCACHE_SIZE)) > 0) c->l1d = (size_t)v;
    if (c->l2 == 0 && (v = sysconf(_SC_LEVEL2_CACHE_SIZE)) > 0) c->l2 = (size_t)v;
    if (c->l3 == 0 && (v = sysconf(_SC_LEVEL3_CACHE_SIZE)) > 0) c->l3 = (size_t)v;
#else
    (void)c;
#endif
}

const mk_caches *mk_cpu_caches(void) {
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        mk_caches c = {0, 0, 0};
        from_sysfs(&c);
        from_sysconf(&c);
        if (c.l1d == 0) c.l1d = reference.l1d;
        if (c.l2 == 0) c.l2 = reference.l2;
        if (c.l3 == 0) c.l3 = reference.l3;
        detected = c;
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    return &detected;
}

size_t mk_l2_scaled(size_t ref) {
    const double v = (double)ref * (double)mk_cpu_caches()->l2 / (double)MK_REF_L2_BYTES;
    const double lo = (double)ref / 4.0, hi = 4.0 * (double)ref;
    return (size_t)(v < lo ? lo : v > hi ? hi : v);
}

mk_caches mk_cpu_caches_set(mk_caches c) {
    const mk_caches before = *mk_cpu_caches();
    mk_caches now = before;
    if (c.l1d) now.l1d = c.l1d;
    if (c.l2) now.l2 = c.l2;
    if (c.l3) now.l3 = c.l3;
    detected = now;
    return before;
}

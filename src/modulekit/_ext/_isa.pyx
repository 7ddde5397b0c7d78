"""Run-time instruction-set selection.

The level is chosen once at import from the CPU's flags and the OS's register-state support.
``MODULEKIT_ISA=generic|avx2|avx512`` forces a path (refused if this CPU lacks it);
:func:`set_isa` switches at run time, which the tests use to run every path this CPU has.
The bfloat16-compute path is chosen beside it: ``MODULEKIT_BF16=none|avx512bf16|amx``,
:func:`set_bf16`.
Kernels read the level through :func:`active_isa` when they are dispatched.
"""
import os

from modulekit._ext._caches cimport mk_caches, mk_cpu_caches

NAMES = ("generic", "avx2", "avx512")

cdef mk_isa _detected = mk_isa_detect()
cdef mk_isa _active = _detected


cdef mk_isa active_isa() noexcept nogil:
    return _active


def detected_isa():
    """The best instruction-set level this CPU and OS support."""
    return NAMES[<int>_detected]


def available_isas():
    """Every level this machine can run, lowest first."""
    return NAMES[: <int>_detected + 1]


def get_isa():
    """The level the kernels dispatch on now."""
    return NAMES[<int>_active]


def set_isa(name):
    """Make every kernel dispatch on level ``name``; returns the previous level's name."""
    global _active
    if name not in NAMES:
        raise ValueError(f"unknown instruction set {name!r}: expected one of {', '.join(NAMES)}")
    level = NAMES.index(name)
    if level > <int>_detected:
        raise ValueError(
            f"instruction set {name!r} is not supported by this CPU "
            f"(best available: {NAMES[<int>_detected]!r})"
        )
    previous = NAMES[<int>_active]
    _active = <mk_isa>level
    return previous


def has_avx512bf16():
    return bool(mk_cpu_has_avx512bf16())


# ---- bfloat16 compute paths (set_float32_matmul_precision("medium")): a second selector
# beside the level, since both bf16 paths need the avx512 level and every other kernel family
# indexes its tables by level. "none" makes "medium" compute in float32.
BF16_NAMES = ("none", "avx512bf16", "amx")

cdef int _bf16_detected = mk_bf16_detect()
cdef int _bf16_default = mk_bf16_default()
cdef int _bf16_chosen = _bf16_default


cdef int active_bf16() noexcept nogil:
    return _bf16_chosen if _active == MK_ISA_AVX512 else 0


def detected_bf16():
    """The best bfloat16-compute path this CPU and OS can run: "amx" (AMX-BF16 tiles, the
    kernel granted the tile state), "avx512bf16" (vdpbf16ps) or "none"."""
    return BF16_NAMES[_bf16_detected]


def default_bf16():
    """The bfloat16-compute path used unless another is chosen: "amx" where the OS granted
    the tile state, else "avx512bf16" where it beats float32 FMAs (AMD CPUs; on Intel
    vdpbf16ps runs at or below the float32 FMA rate), else "none"."""
    return BF16_NAMES[_bf16_default]


def available_bf16():
    """Every bfloat16-compute path this machine can run, "none" first."""
    return BF16_NAMES[: _bf16_detected + 1]


def get_bf16():
    """The bfloat16-compute path the kernels dispatch on now: the one chosen (see
    :func:`set_bf16`) while the active level is "avx512", else "none"."""
    return BF16_NAMES[active_bf16()]


def set_bf16(name):
    """Make bfloat16 compute run on path ``name`` ("none", "avx512bf16", "amx"); returns
    the previously chosen path's name. Refused when this machine lacks it."""
    global _bf16_chosen
    if name not in BF16_NAMES:
        raise ValueError(
            f"unknown bfloat16 path {name!r}: expected one of {', '.join(BF16_NAMES)}"
        )
    level = BF16_NAMES.index(name)
    if level > _bf16_detected:
        reason = ""
        if name == "amx" and mk_amx_status() == -1:
            reason = " (the operating system refused the AMX tile state)"
        raise ValueError(
            f"bfloat16 path {name!r} is not supported on this machine{reason} "
            f"(best available: {BF16_NAMES[_bf16_detected]!r})"
        )
    previous = BF16_NAMES[_bf16_chosen]
    _bf16_chosen = level
    return previous


def amx_status():
    """What the AMX tile-state request gave: "granted", "refused" (the kernel said no:
    bfloat16 compute then runs on AVX512-BF16) or "unsupported" (no AMX-BF16 here)."""
    return {1: "granted", -1: "refused"}.get(mk_amx_status(), "unsupported")


_forced = os.environ.get("MODULEKIT_ISA", "").strip().lower()
if _forced:
    set_isa(_forced)
_forced_bf16 = os.environ.get("MODULEKIT_BF16", "").strip().lower()
if _forced_bf16:
    set_bf16(_forced_bf16)


def cpu_caches():
    """The CPU's data caches in bytes as the kernels' block sizes see them
    (``kernels/common/caches.h``): ``{"l1d": ..., "l2": ..., "l3": ...}``, L1 data and L2 per
    core and the last level, from Linux sysfs (else ``sysconf``, else the reference machine's
    48 KiB / 1 MiB / 32 MiB). The L2 budgets of the GEMM's and the convolutions' blocking
    scale with ``l2`` (``docs/design.md``, "The shared kernel layer")."""
    cdef const mk_caches *c = mk_cpu_caches()
    return {"l1d": int(c.l1d), "l2": int(c.l2), "l3": int(c.l3)}

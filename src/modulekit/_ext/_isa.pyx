"""Run-time instruction-set selection.

The level is chosen once at import from the CPU's flags and the OS's register-state support.
``MODULEKIT_ISA=generic|avx2|avx512`` forces a path (refused if this CPU lacks it);
:func:`set_isa` switches at run time, which the tests use to run every path this CPU has.
Kernels read the level through :func:`active_isa` when they are dispatched.
"""
import os

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


_forced = os.environ.get("MODULEKIT_ISA", "").strip().lower()
if _forced:
    set_isa(_forced)

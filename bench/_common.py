"""Shared timing helpers for the bench scripts: interleaved repeats, medians, ratios.

These machines are shared and noisy, so every comparison times modulekit and its peers in
the same run, alternating between them round by round so drift hits all sides alike.
"""

from __future__ import annotations

import os
import statistics
import sys
import time


def numpy_env_clean():
    """Re-exec this script without OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE (they slow NumPy here)."""
    if any(k in os.environ for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")):
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def per_call(fn, number):
    """Seconds per call of ``fn`` over ``number`` back-to-back calls."""
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number


def interleaved(funcs, *, rounds=15, number=1000, warmup=1):
    """Time each callable in ``funcs`` (name -> fn), alternating between them each round.

    Returns name -> dict(median=seconds per call, low, high) over the rounds.
    """
    for fn in funcs.values():
        for _ in range(warmup):
            per_call(fn, max(1, number // 10))
    samples = {name: [] for name in funcs}
    for _ in range(rounds):
        for name, fn in funcs.items():
            samples[name].append(per_call(fn, number))
    out = {}
    for name, values in samples.items():
        values.sort()
        q = max(0, len(values) // 4)
        out[name] = {
            "median": statistics.median(values),
            "low": values[q],
            "high": values[-1 - q],
        }
    return out


def fmt_time(seconds):
    if seconds < 1e-6:
        return f"{seconds * 1e9:7.1f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:7.2f} us"
    if seconds < 1:
        return f"{seconds * 1e3:7.2f} ms"
    return f"{seconds:7.3f} s "


def print_table(title, rows, columns):
    """Print ``rows`` (list of dicts) under ``title`` with the given (key, header) columns."""
    print(f"\n## {title}")
    widths = [max(len(h), *(len(str(r.get(k, ""))) for r in rows)) for k, h in columns]
    print("  ".join(h.ljust(w) for (_, h), w in zip(columns, widths)))
    for r in rows:
        print("  ".join(str(r.get(k, "")).ljust(w) for (k, _), w in zip(columns, widths)))
    sys.stdout.flush()

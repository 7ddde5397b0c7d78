"""Throughput of modulekit's dtype casts against NumPy's and ml_dtypes' ``astype``.

Run: ``python bench/casts.py [--quick] [--threshold]``.

Casts 64 MiB of float32 to float16 and to bfloat16, and the same element count back to
float32, timing in one run, round by round in turn (interleaved, medians):

- ``cast``: ``modulekit._ext._cast.cast(x, dtype)``, a new array, as ``astype`` returns;
- ``cast_into``: ``cast_into(x, out)`` into an array allocated once (no page faults);
- ``in place`` (narrowing casts): ``cast_into`` into a view of the source's own memory;
- the peer: ``x.astype(dtype)`` (NumPy's own cast for float16, ml_dtypes' for bfloat16).

GB/s counts the bytes read plus the bytes written; speed-up = peer median / modulekit
median. The fastest sample of each ("best", and best/best) is printed too: on a shared,
loaded machine it shows the cost without the waits for descheduled threads.
Bars (issue): float32 -> float16 >= 20x ``astype``, float32 -> bfloat16 >= 10x ml_dtypes.

``--threshold`` measures the serial and the parallel path at growing sizes, the data behind
``MK_CAST_PARALLEL_MIN_BYTES`` in ``modulekit/_ext/kernels/cast/cast-config.c``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import fmt_time, interleaved, print_table  # noqa: E402

from modulekit._ext import _cast, _isa, _openmp_helpers  # noqa: E402

MIB = 1 << 20
F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
CASES = [(F32, F16), (F32, BF16), (F16, F32), (BF16, F32)]


def _gbs(nbytes, seconds):
    return f"{nbytes / seconds / 1e9:6.1f}"


def _interleaved_with_setup(funcs, rounds):
    """Like ``_common.interleaved`` with one call per sample, but each entry is
    ``(setup, fn)`` and ``setup`` (untimed, may be None) runs before every timed call."""
    for setup, fn in funcs.values():       # warm-up
        if setup is not None:
            setup()
        fn()
    samples = {name: [] for name in funcs}
    for _ in range(rounds):
        for name, (setup, fn) in funcs.items():
            if setup is not None:
                setup()
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
    out = {}
    for name, values in samples.items():
        values.sort()
        q = len(values) // 4
        out[name] = {"median": statistics.median(values), "low": values[q],
                     "high": values[-1 - q], "best": values[0]}
    return out


def run(quick=False, nbytes=64 * MIB) -> list[dict]:
    """Time the four casts of ``nbytes`` of float32 (or as many elements from 16 bits).

    Returns one dict per (case, implementation): ``case``, ``impl``, ``seconds`` (median),
    ``gbps`` (bytes read + written per second / 1e9) and ``ratio`` (peer time / this time;
    1.0 for the peer). Also prints them as a table.
    """
    n = nbytes // 4
    rounds = 3 if quick else 11
    rng = np.random.default_rng(0)
    base = rng.standard_normal(n, dtype=np.float32)
    rows = []
    for src, dst in CASES:
        x = base.astype(src) if src != F32 else base
        out = np.empty(n, dst)
        peer = "numpy astype" if BF16 not in (src, dst) else "ml_dtypes astype"
        funcs = {
            "modulekit cast": (None, lambda x=x, dst=dst: _cast.cast(x, dst)),
            "modulekit cast_into": (None, lambda x=x, out=out: _cast.cast_into(x, out)),
        }
        if dst.itemsize < src.itemsize:
            # narrowing in the source's own memory (what Tensor._cast_ / Module.to do);
            # the source values are restored, untimed, before every call
            buf = np.empty_like(x)
            view = buf.view(np.uint8)[: n * dst.itemsize].view(dst)
            funcs["modulekit in place"] = (
                lambda buf=buf, x=x: np.copyto(buf, x),
                lambda buf=buf, view=view: _cast.cast_into(buf, view),
            )
        funcs[peer] = (None, lambda x=x, dst=dst: x.astype(dst))
        res = _interleaved_with_setup(funcs, rounds)
        moved = n * (src.itemsize + dst.itemsize)
        t_peer = res[peer]["median"]
        for impl, r in res.items():
            rows.append({
                "case": f"{src.name} -> {dst.name}",
                "impl": impl,
                "seconds": r["median"],
                "gbps": moved / r["median"] / 1e9,
                "ratio": t_peer / r["median"],
                "time": fmt_time(r["median"]),
                "spread": f"{fmt_time(r['low']).strip()} .. {fmt_time(r['high']).strip()}",
                "GB/s": _gbs(moved, r["median"]),
                "x": f"{t_peer / r['median']:.1f}x",
                "best": fmt_time(r["best"]),
                "xbest": f"{res[peer]['best'] / r['best']:.1f}x",
            })
    print_table(
        f"dtype casts, {nbytes // MIB} MiB of float32 ({n} elements), ISA {_isa.get_isa()}, "
        f"{_openmp_helpers.get_num_threads()} threads (GB/s: read + written; x: peer / this)",
        rows,
        [("case", "case"), ("impl", "implementation"), ("time", "median"),
         ("spread", "IQR"), ("GB/s", "GB/s"), ("x", "speed-up"), ("best", "best"),
         ("xbest", "best/best")],
    )
    return [{k: r[k] for k in ("case", "impl", "seconds", "gbps", "ratio")} for r in rows]


def threshold(quick=False) -> list[dict]:
    """Time float32 -> float16 ``cast_into`` serial and on every thread, size by size."""
    nthreads = _openmp_helpers.get_num_threads()
    previous = _cast.set_parallel_min_bytes(0)     # let the parallel path run at any size
    rows = []
    try:
        for kib in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096):
            work = kib * 1024
            n = work // 6                          # 4 bytes read + 2 written per element
            x = np.ones(n, np.float32)
            out = np.empty(n, np.float16)

            def serial(x=x, out=out):
                _openmp_helpers.set_num_threads(1)
                _cast.cast_into(x, out)

            def parallel(x=x, out=out):
                _openmp_helpers.set_num_threads(nthreads)
                _cast.cast_into(x, out)

            number = max(20, (200 if quick else 2000) * 16 // kib)
            res = interleaved({"serial": serial, "parallel": parallel},
                              rounds=3 if quick else 9, number=number)
            s, p = res["serial"]["median"], res["parallel"]["median"]
            rows.append({"work": f"{kib} KiB", "serial": fmt_time(s), "parallel": fmt_time(p),
                         "speed-up": f"{s / p:.2f}x", "bytes": work, "s": s, "p": p})
    finally:
        _cast.set_parallel_min_bytes(previous)
        _openmp_helpers.reset_num_threads()
    print_table(
        f"float32 -> float16 cast_into, serial vs {nthreads} threads (work = bytes read + "
        f"written; the compiled threshold is {previous // 1024} KiB)",
        rows,
        [("work", "work"), ("serial", "1 thread"), ("parallel", f"{nthreads} threads"),
         ("speed-up", "speed-up")],
    )
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument("--threshold", action="store_true",
                        help="measure serial vs parallel by size instead")
    args = parser.parse_args(argv)
    if args.threshold:
        threshold(args.quick)
    else:
        run(args.quick)


if __name__ == "__main__":
    main()

"""Timing helpers shared by the bench suites: interleaved repeats, medians, ratio tables.

These machines are shared and noisy, so every comparison times modulekit and its peers in
the same run, alternating between them round by round so drift hits all sides alike.

A suite's ``run(quick=False)`` returns rows (dicts) with at least ``suite``, ``case``,
``impl`` ("modulekit" or a peer's name) and ``seconds`` (the median time of one run of the
case); ``low``/``high`` (quartiles) and ``gflops``/``gbps`` where they mean something.
"""

from __future__ import annotations

import statistics
import sys
import time

MODULEKIT = "modulekit"


def settle(limit=0.5, window=0.002):
    """Wait until this process's other threads have stopped using the CPU.

    A peer's thread pool keeps spinning for a while after its call returns (OpenBLAS about
    2^28 cycles, onnxruntime's intra-op pool, libgomp's GOMP_SPINCOUNT): timing the next peer
    while it spins charges that peer for a core it does not have. Sleeps in ``window``-second
    steps until one passes with the process using under a tenth of a core (the pool has
    parked), or ``limit`` seconds have passed. Returns the seconds waited."""
    t_start = time.perf_counter()
    while True:
        c0, t0 = time.process_time(), time.perf_counter()
        time.sleep(window)
        t1 = time.perf_counter()
        if time.process_time() - c0 < 0.1 * (t1 - t0) or t1 - t_start >= limit:
            return t1 - t_start


def per_call(fn, number):
    """Seconds per call of ``fn`` over ``number`` back-to-back calls."""
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number


def interleaved(funcs, *, rounds=15, number=1000, warmup=1, pause=0.0):
    """Time each callable in ``funcs`` (name -> fn), alternating between them each round.

    Each round starts one library later than the last (the order rotates), so what a library
    leaves behind for the next one (worker threads still spinning, caches it evicted) falls on
    every library alike. With ``pause`` > 0, each library's turn starts after that many
    seconds of untimed sleep, which lets the previous library's spinning workers park (the
    conv, model and BERT suites: two OpenMP runtimes and onnxruntime's pool share the cores).

    Returns name -> {"seconds": median seconds per call, "low", "high": quartiles}.
    """
    for fn in funcs.values():
        for _ in range(warmup):
            per_call(fn, max(1, number // 10))
    names = list(funcs)
    samples = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            if pause:
                time.sleep(pause)
            samples[name].append(per_call(funcs[name], number))
    out = {}
    for name, values in samples.items():
        values.sort()
        q = len(values) // 4
        out[name] = {"seconds": statistics.median(values), "low": values[q],
                     "high": values[-1 - q]}
    return out


def with_ratios(rows):
    """Add ``speedup`` (peer seconds / modulekit seconds, > 1: modulekit faster) to each peer
    row, matched on (suite, case)."""
    ours = {(r["suite"], r["case"]): r["seconds"] for r in rows
            if r.get("impl") == MODULEKIT and r.get("seconds")}
    for r in rows:
        base = ours.get((r.get("suite"), r.get("case")))
        if r.get("impl") != MODULEKIT and base and r.get("seconds"):
            r["speedup"] = r["seconds"] / base
    return rows


def fmt_time(seconds):
    if seconds is None:
        return ""
    if seconds < 1e-6:
        return f"{seconds * 1e9:.1f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.3f} s"


def table(rows):
    """Text table of rows: case, implementation, median, spread, rate, modulekit's speedup."""
    with_ratios(rows)
    header = ["suite", "case", "impl", "median", "IQR", "rate", "modulekit speedup"]
    lines = []
    for r in rows:
        if r.get("error"):
            lines.append([r.get("suite", ""), r.get("case", ""), r.get("impl", ""),
                          "skipped: " + str(r["error"]), "", "", ""])
            continue
        spread = (f"{fmt_time(r['low'])}..{fmt_time(r['high'])}"
                  if r.get("low") is not None else "")
        rate = (f"{r['gflops']:.1f} GFLOP/s" if r.get("gflops") else
                f"{r['gbps']:.2f} GB/s" if r.get("gbps") else "")
        speed = f"{r['speedup']:.2f}x" if r.get("speedup") else ""
        lines.append([r.get("suite", ""), r.get("case", ""), r.get("impl", ""),
                      fmt_time(r.get("seconds")), spread, rate, speed])
    widths = [max(len(h), *(len(str(ln[i])) for ln in lines)) if lines else len(h)
              for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(str(c).ljust(w) for c, w in zip(ln, widths)) for ln in lines]
    return "\n".join(out)


def report(rows, file=None):
    """Print ``rows`` as a table (speedup = peer time / modulekit time)."""
    print(table(rows), file=file or sys.stdout, flush=True)

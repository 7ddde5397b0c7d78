"""Timing helpers shared by the bench suites: interleaved repeats, medians, ratio tables.

These machines are shared and noisy, so every comparison times modulekit and its peers in
the same run, alternating between them round by round so drift hits all sides alike.

A suite's ``run(quick=False)`` returns rows (dicts) with at least ``suite``, ``case``,
``impl`` ("modulekit", a peer's name, "modulekit ..." for a variant of modulekit, "floor: ..."
for a reference; see :func:`role`), ``seconds`` (the median time of one run of the case) and
its spread ``low``/``high`` (quartiles, see :func:`summary`); ``gflops``/``gbps`` where they
mean something. Every in-process timing goes through :func:`interleaved`.
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


def summary(samples):
    """The statistics every row reports for a list of timings (seconds).

    ``seconds`` is the median; ``low`` and ``high`` bound the middle half of the samples (the
    quartiles; with fewer than 4 samples, the fastest and the slowest); ``best`` is the
    fastest."""
    values = sorted(samples)
    if not values:
        raise ValueError("summary: no samples")
    q = len(values) // 4
    return {"seconds": statistics.median(values), "low": values[q], "high": values[-1 - q],
            "best": values[0]}


def _calls_per_sample(fn, setup, min_time):
    """How many calls of ``fn`` take about ``min_time`` seconds (at least one)."""
    if setup is not None:
        setup()
    t0 = time.perf_counter()
    fn()
    return max(1, int(min_time / max(time.perf_counter() - t0, 1e-7)))


def interleaved(funcs, *, rounds=15, number=1000, min_time=None, warmup=1, setup=None,
                pause=0.0, wait_idle=False):
    """Time each callable in ``funcs`` (name -> fn), alternating between them each round.

    The one timer of every bench suite. Each round starts one library later than the last
    (the order rotates), so what a library leaves behind for the next one (worker threads
    still spinning, caches it evicted) falls on every library alike.

    Parameters
    ----------
    funcs : dict of str to callable
        The implementations of one case, timed against each other.
    rounds : int
        Samples per implementation.
    number : int
        Calls per sample (the sample is their mean), ignored with ``min_time``.
    min_time : float, optional
        Calls per sample chosen for each implementation (after warm-up) so that one sample
        lasts about this many seconds.
    warmup : int
        Untimed warm-up samples per implementation (of ``number // 10`` calls; one call with
        ``min_time``) before the first round.
    setup : dict of str to callable, optional
        Called, untimed, before every sample of that implementation (restoring an input an
        in-place operation changed, setting a thread count, an untimed first call that
        brings the working set back into the caches).
    pause : float
        Seconds of untimed sleep before each sample: lets the previous library's spinning
        workers park (two OpenMP runtimes and onnxruntime's pool share the cores).
    wait_idle : bool
        Also wait, after the pause, until this process's other threads have stopped using
        the CPU (:func:`settle`).

    Returns
    -------
    dict
        name -> :func:`summary` of the seconds per call: ``seconds`` (median), ``low``,
        ``high`` (quartiles), ``best``.
    """
    setup = setup or {}
    unknown = set(setup) - set(funcs)
    if unknown:
        raise ValueError(f"interleaved: setup for unknown implementation(s) {sorted(unknown)}")
    names = list(funcs)
    calls = {}
    for name in names:
        fn, before = funcs[name], setup.get(name)
        for _ in range(warmup):
            if before is not None:
                before()
            per_call(fn, 1 if min_time else max(1, number // 10))
        calls[name] = (_calls_per_sample(fn, before, min_time) if min_time else number)
    samples = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            if pause:
                time.sleep(pause)
            if wait_idle:
                settle()
            if name in setup:
                setup[name]()
            samples[name].append(per_call(funcs[name], calls[name]))
    return {name: summary(values) for name, values in samples.items()}


def role(row):
    """What a row measures, from its ``impl``: ``"modulekit"`` (the row the others are compared
    with), ``"peer"`` (another library), ``"variant"`` (another way of running modulekit, named
    ``"modulekit ..."``: one thread, layer by layer, without a memory map) or ``"floor"`` (a
    reference that does only the unavoidable part of the work, named ``"floor: ..."``)."""
    impl = row.get("impl", "")
    if impl == MODULEKIT:
        return "modulekit"
    if impl.startswith("floor"):
        return "floor"
    if impl.startswith(MODULEKIT):
        return "variant"
    return "peer"


def with_ratios(rows):
    """Add ``speedup`` (peer seconds / modulekit seconds, > 1: modulekit faster) to each row
    but modulekit's, matched on (suite, case); where both rows have a spread, also
    ``speedup_low`` and ``speedup_high``, the ratio's range over the two rows' ``low..high``
    (the slow end of one against the fast end of the other)."""
    ours = {(r["suite"], r["case"]): r for r in rows
            if r.get("impl") == MODULEKIT and r.get("seconds")}
    for r in rows:
        base = ours.get((r.get("suite"), r.get("case")))
        if r.get("impl") != MODULEKIT and base and r.get("seconds"):
            r["speedup"] = r["seconds"] / base["seconds"]
            if all(x.get(k) for x in (r, base) for k in ("low", "high")):
                r["speedup_low"] = r["low"] / base["high"]
                r["speedup_high"] = r["high"] / base["low"]
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
    header = ["suite", "case", "impl", "median", "spread", "rate", "modulekit speedup"]
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

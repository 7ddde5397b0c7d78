"""``python -m modulekit.bench [SUITE ...] [--quick] [--json OUT] [--plot OUT.png]``.

Runs the named bench suites (default: all) against every optional peer that is installed, in
one run; prints each suite's table of medians, spreads and modulekit's speedup over each peer
(peer time / modulekit time), then the performance targets met or missed; writes JSON with
the machine (CPU flags, ISA path, threads, library versions) and, with ``--plot``, a bar
chart (speedups with error bars; reference rows apart from the other libraries).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time

from modulekit.bench import SUITES
from modulekit.bench._timing import report, role, with_ratios
from modulekit.bench.bars import check_bars, format_bars
from modulekit.bench.machine import machine_info


def _reexec_env(argv, passive):
    """Re-exec without OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE (they slow NumPy, a peer, here) and,
    with ``--passive``, with ``OMP_WAIT_POLICY=PASSIVE`` (OpenMP reads it at start-up)."""
    blas = any(k in os.environ for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"))
    wait = passive and os.environ.get("OMP_WAIT_POLICY") != "PASSIVE"
    if blas or wait:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
        if blas:
            env["MODULEKIT_BENCH_OPENBLAS_UNSET"] = "1"
        if passive:
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        os.execve(sys.executable, [sys.executable, "-m", "modulekit.bench", *argv], env)


def _speedup_bars(rows):
    """(label, speedup, [below, above]) per row with a speedup: the error bar spans the
    ratio's range over the two rows' spreads (``speedup_low`` .. ``speedup_high``)."""
    out = []
    for r in rows:
        v = r["speedup"]
        lo, hi = r.get("speedup_low", v), r.get("speedup_high", v)
        out.append((f"{r['case']} vs {r['impl']}", v, [max(v - lo, 0.0), max(hi - v, 0.0)]))
    return out


def plot(rows, path):
    """Bar chart of modulekit's speedup (log scale; > 1 is faster), with error bars from the
    rows' spreads: against the other libraries (green: modulekit faster, red: slower) and,
    in a separate panel, against the reference rows (modulekit's own variants and the
    "floor" rows), which are not competitors."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with_ratios(rows)
    ratios = [r for r in rows if r.get("speedup")]
    peers = [r for r in ratios if role(r) == "peer"]
    references = [r for r in ratios if role(r) in ("variant", "floor")]
    panels = [
        ("modulekit vs other libraries (green: modulekit faster, red: slower)", peers,
         ["#2a7" if r["speedup"] >= 1 else "#c44" for r in peers]),
        ("modulekit vs reference rows, not competitors (blue: modulekit run another way, "
         "grey: a floor that does only the unavoidable work)", references,
         ["#48c" if role(r) == "variant" else "#999" for r in references]),
    ]
    panels = [p for p in panels if p[1]]
    if not panels:
        raise ValueError("plot: no row has a speedup to draw")
    heights = [len(panel_rows) for _, panel_rows, _ in panels]
    fig, axes = plt.subplots(len(panels), 1, squeeze=False, sharex=True,
                             figsize=(10, 0.22 * sum(heights) + 1.0 * len(panels) + 0.6),
                             gridspec_kw={"height_ratios": heights})
    for ax, (title, panel_rows, colors) in zip(axes[:, 0], panels):
        bars = _speedup_bars(panel_rows)
        ax.barh(range(len(bars)), [b[1] for b in bars], xerr=list(zip(*[b[2] for b in bars])),
                color=colors, ecolor="k", error_kw={"lw": 0.8, "capsize": 2})
        ax.set_yticks(range(len(bars)), [b[0] for b in bars], fontsize=7)
        ax.set_ylim(len(bars) - 0.5, -0.5)
        ax.set_xscale("log")
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_title(title, fontsize=8, loc="left")
    axes[-1, 0].set_xlabel("modulekit speedup: other time / modulekit time (medians; error "
                           "bars: the ratio over both rows' quartiles)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m modulekit.bench", description=__doc__)
    parser.add_argument("suites", nargs="*", metavar="SUITE",
                        help=f"suites to run (default: all): {', '.join(SUITES)}")
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    parser.add_argument("--json", metavar="OUT", help="write rows and machine info as JSON")
    parser.add_argument("--plot", metavar="OUT.png", help="draw the speedups (matplotlib)")
    parser.add_argument("--passive", action="store_true",
                        help="OMP_WAIT_POLICY=PASSIVE for every peer: steadier on a loaded "
                             "machine, slower wake-ups on a quiet one")
    parser.add_argument("--list", action="store_true", help="list the suites and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(SUITES))
        return 0
    unknown = [s for s in args.suites if s not in SUITES]
    if unknown:
        parser.error(f"unknown suite(s) {', '.join(unknown)}: choose from {', '.join(SUITES)}")
    _reexec_env(argv, args.passive)
    suites = args.suites or list(SUITES)
    machine = machine_info()
    print(f"modulekit bench on {machine['cpu']} ({machine['cores']} cores), ISA "
          f"{machine['isa']}, {machine['threads']} threads; peers: "
          f"{', '.join(f'{k} {v}' for k, v in machine['versions'].items() if v)}", flush=True)
    rows, status = [], {}
    start = time.perf_counter()
    for i, name in enumerate(suites, 1):
        t0 = time.perf_counter()
        print(f"\n[{i}/{len(suites)}] {name} ...", flush=True)
        try:
            suite = importlib.import_module(f"modulekit.bench.{name}")
            got = suite.run(quick=args.quick)
        except ImportError as exc:
            status[name] = {"error": f"not runnable here: {exc}"}
            print(f"[{i}/{len(suites)}] {name}: skipped ({exc})", flush=True)
            continue
        with_ratios(got)
        rows += got
        status[name] = {"seconds": time.perf_counter() - t0}
        report(got)
        print(f"[{i}/{len(suites)}] {name} done in {status[name]['seconds']:.1f} s "
              f"(total {time.perf_counter() - start:.1f} s)", flush=True)
    bars = check_bars(rows, machine)
    if bars:
        print("\nTargets:\n" + format_bars(bars))
    command = " ".join(["python -m modulekit.bench", *args.suites]
                       + ["--quick"] * args.quick + ["--passive"] * args.passive)
    result = {"machine": machine, "command": command,
              "quick": args.quick, "suites": status, "rows": rows, "bars": bars}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
        print(f"wrote {args.json}")
    if args.plot:
        try:
            print(f"wrote {plot(rows, args.plot)}")
        except ImportError:
            print("--plot needs matplotlib: pip install matplotlib", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

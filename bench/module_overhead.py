"""Per-call overhead of Module.__call__, and dtype-cast throughput.

Run: ``python bench/module_overhead.py [--quick]``. Prints, measured in one run with the
peers interleaved round by round:

- the cost of calling ``nn.Identity`` and a 10-deep ``nn.Sequential`` of Identity on a small
  array, against torch's (if installed), as a ratio (bar: Identity <= 0.5x torch);
- float32 -> float16 / bfloat16 casts of 64 MiB, against ``ndarray.astype`` (bar >= 20x) and
  ml_dtypes' ``astype`` (bar >= 10x), from ``bench/casts.py``.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import fmt_time, interleaved, print_table  # noqa: E402

import modulekit as mk  # noqa: E402
from modulekit import nn  # noqa: E402


def module_overhead(quick=False):
    x = np.zeros((4, 4), np.float32)
    ident = nn.Identity()
    deep = nn.Sequential(*[nn.Identity() for _ in range(10)])
    cases = {"Identity": (ident, None), "Sequential(10 x Identity)": (deep, None)}
    try:
        import torch

        tx = torch.zeros(4, 4)
        cases["Identity"] = (ident, torch.nn.Identity())
        cases["Sequential(10 x Identity)"] = (
            deep, torch.nn.Sequential(*[torch.nn.Identity() for _ in range(10)])
        )
        torch.set_grad_enabled(False)
    except ImportError:
        torch = None
        print("torch is not installed: no peer for the call-overhead comparison")
    rows = []
    number = 2000 if quick else 20000
    rounds = 5 if quick else 15
    for name, (ours, theirs) in cases.items():
        funcs = {"modulekit": lambda m=ours: m(x)}
        if theirs is not None:
            funcs["torch"] = lambda m=theirs: m(tx)
        res = interleaved(funcs, rounds=rounds, number=number)
        row = {
            "case": name,
            "modulekit": fmt_time(res["modulekit"]["median"]),
            "spread": f"{fmt_time(res['modulekit']['low']).strip()}.."
                      f"{fmt_time(res['modulekit']['high']).strip()}",
        }
        if "torch" in res:
            row["torch"] = fmt_time(res["torch"]["median"])
            row["ratio"] = f"{res['modulekit']['median'] / res['torch']['median']:.2f}x"
        rows.append(row)
    print_table(
        "Module call overhead (time per call; ratio = modulekit / torch, lower is better)",
        rows,
        [("case", "case"), ("modulekit", "modulekit"), ("spread", "IQR"), ("torch", "torch"),
         ("ratio", "ratio")],
    )
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args(argv)
    print(f"modulekit {mk.__version__}, threads {mk.get_num_threads()}")
    module_overhead(args.quick)
    import casts

    casts.run(quick=args.quick)


if __name__ == "__main__":
    main()

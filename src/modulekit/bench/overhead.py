"""Per-call overhead of ``Module.__call__`` against torch's.

``python -m modulekit.bench overhead`` (or ``python bench/module_overhead.py``): the time of
calling ``nn.Identity`` and a 10-deep ``nn.Sequential`` of Identity on a small array, against
the same torch modules (if torch is installed), interleaved round by round.
Target: Identity <= 0.5x torch's time.
"""

from __future__ import annotations

import sys

import numpy as np

from modulekit import nn
from modulekit.bench._timing import interleaved, report


def run(quick=False):
    x = np.zeros((4, 4), np.float32)
    ours = {
        "Identity call": nn.Identity(),
        "Sequential(10 x Identity) call": nn.Sequential(*[nn.Identity() for _ in range(10)]),
    }
    theirs = {}
    try:
        import torch

        torch.set_grad_enabled(False)
        tx = torch.zeros(4, 4)
        theirs = {
            "Identity call": torch.nn.Identity(),
            "Sequential(10 x Identity) call": torch.nn.Sequential(
                *[torch.nn.Identity() for _ in range(10)]
            ),
        }
    except ImportError:
        print("torch is not installed: no peer for the call-overhead comparison")
    rows = []
    for case, module in ours.items():
        funcs = {"modulekit": lambda m=module: m(x)}
        if case in theirs:
            funcs["torch"] = lambda m=theirs[case]: m(tx)
        res = interleaved(funcs, rounds=5 if quick else 15, number=2000 if quick else 20000)
        rows += [dict(suite="overhead", case=case, impl=impl, **stats)
                 for impl, stats in res.items()]
    return rows


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    report(run(quick="--quick" in argv))


if __name__ == "__main__":
    main()

"""Recurrent layers against torch (optional peer), float32, sequence length 100.

``python -m modulekit.bench rnn`` (or ``python bench/rnn.py [--quick] [--passive]``; quick runs
the batch-1 cases only). Cases:
``LSTM`` and ``GRU`` (one layer, unidirectional, input size = hidden size) at hidden 256 and
1024, batch 1 and 32, time-major input of 100 steps: the whole forward (input projection,
the recurrence, the output and final states), the modules holding the same weights. torch
runs under ``no_grad`` with modulekit's thread count. GFLOP/s counts the two GEMMs per step,
``2 * T * B * G * H * (I + H)`` (G = 4 gates for LSTM, 3 for GRU). Each library's turn starts
after a 50 ms pause (the two OpenMP runtimes share the cores; see ``bench/conv.py``).
"""

from __future__ import annotations

import sys

import numpy as np

from modulekit.bench._timing import interleaved

SUITE = "rnn"
PAUSE = 0.05
SEQ = 100

# (layer, hidden, batch)
CASES = [(layer, h, b) for layer in ("LSTM", "GRU") for h in (256, 1024) for b in (1, 32)]


def case_name(layer: str, hidden: int, batch: int) -> str:
    return f"{layer} hidden {hidden} batch {batch} seq {SEQ}"


def run(quick=False):
    """Time every case for modulekit and torch (when installed); returns the bench rows."""
    import modulekit
    import modulekit.nn as mnn

    try:
        import torch

        torch.set_grad_enabled(False)
        torch.set_num_threads(modulekit.get_num_threads())
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    rows = []
    cases = CASES if not quick else [c for c in CASES if c[2] == 1]  # quick: batch 1
    for layer, hidden, batch in cases:
        x = rng.standard_normal((SEQ, batch, hidden)).astype(np.float32)
        mk = getattr(mnn, layer)(hidden, hidden).eval()
        funcs = {"modulekit": lambda mk=mk, x=x: mk(x)}
        if torch is not None:
            tm = getattr(torch.nn, layer)(hidden, hidden).eval()
            mk.load_state_dict(tm.state_dict())
            xt = torch.from_numpy(x)
            funcs["torch"] = lambda tm=tm, xt=xt: tm(xt)
            # the libraries must agree before they are timed
            np.testing.assert_allclose(mk(x)[0], tm(xt)[0].numpy(), rtol=1e-3, atol=1e-4)
        mk.initialize()
        gates = 4 if layer == "LSTM" else 3
        flops = 2.0 * SEQ * batch * gates * hidden * (hidden + hidden)
        big = hidden * batch >= 1024 * 32
        number = 1 if quick else (2 if big else 5)
        res = interleaved(funcs, rounds=3 if quick else 9, number=number, pause=PAUSE)
        for impl, stats in res.items():
            rows.append(dict(suite=SUITE, case=case_name(layer, hidden, batch), impl=impl,
                             gflops=flops / stats["seconds"] / 1e9, **stats))
    return rows


def main(argv=None):
    from modulekit.bench.__main__ import main as bench_main

    return bench_main(["rnn", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()

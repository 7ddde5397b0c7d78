"""Group and instance normalisation against torch (an optional peer), float32.

``python -m modulekit.bench norm`` (or ``python bench/norm.py [--quick]``). Cases, each the
layer's whole forward (a new output array) with affine weights:

- GroupNorm, 32 groups over 256 channels at 56x56, batch 8 (target: >= 1.0x torch);
- GroupNorm, 32 groups over 64 channels at 112x112, batch 1;
- InstanceNorm2d (one group per channel) over 64 channels at 56x56, batch 8.

modulekit runs ``nn.GroupNorm`` / ``nn.InstanceNorm2d`` (the ``_ext._norm`` kernel), torch the
same ``torch.nn`` layers with the same weights; the outputs are checked to agree before timing.
GB/s counts the input read once and the output written once (the least any implementation
moves). Each library's turn starts after a 50 ms pause outside the timed region (two OpenMP
runtimes share the cores; see ``modulekit.bench.conv``).
"""

from __future__ import annotations

import sys

import numpy as np

from modulekit.bench._timing import interleaved

SUITE = "norm"
PAUSE = 0.05

# case, layer, (N, C, H, W), groups
CASES = [
    ("GroupNorm 32 groups 256ch 56x56 batch 8", "GroupNorm", (8, 256, 56, 56), 32),
    ("GroupNorm 32 groups 64ch 112x112 batch 1", "GroupNorm", (1, 64, 112, 112), 32),
    ("InstanceNorm2d 64ch 56x56 batch 8", "InstanceNorm2d", (8, 64, 56, 56), None),
]


def _layers(kind, c, groups, rng):
    import modulekit.nn as mnn

    w = rng.standard_normal(c).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    if kind == "GroupNorm":
        mk = mnn.GroupNorm(groups, c)
    else:
        mk = mnn.InstanceNorm2d(c, affine=True)
    mk.load_state_dict({"weight": w, "bias": b})
    try:
        import torch
    except ImportError:
        return mk.eval(), None
    tm = torch.nn.GroupNorm(groups, c) if kind == "GroupNorm" else \
        torch.nn.InstanceNorm2d(c, affine=True)
    tm.load_state_dict({"weight": torch.from_numpy(w), "bias": torch.from_numpy(b)})
    return mk.eval(), tm.eval()


def run(quick=False):
    """Time every case for modulekit and torch (when installed); returns the bench rows."""
    from modulekit._ext import _openmp_helpers

    try:
        import torch

        torch.set_grad_enabled(False)
        torch.set_num_threads(_openmp_helpers.get_num_threads())
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    rows = []
    for case, kind, shape, groups in CASES:
        x = (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)
        mk, tm = _layers(kind, shape[1], groups, rng)
        funcs = {"modulekit": lambda mk=mk, x=x: mk(x)}
        if tm is not None:
            tx = torch.from_numpy(x)
            funcs["torch"] = lambda tm=tm, tx=tx: tm(tx)
            # the libraries must agree before they are timed
            np.testing.assert_allclose(funcs["modulekit"](), funcs["torch"]().numpy(),
                                       rtol=1e-4, atol=1e-4)
        res = interleaved(funcs, rounds=3 if quick else 11, number=2 if quick else 10,
                          pause=PAUSE)
        moved = 2 * x.nbytes
        for impl, stats in res.items():
            rows.append(dict(suite=SUITE, case=case, impl=impl,
                             gbps=moved / stats["seconds"] / 1e9, **stats))
    return rows


def main(argv=None):
    from modulekit.bench.__main__ import main as bench_main

    return bench_main(["norm", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()

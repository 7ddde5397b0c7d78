"""First call after ``initialize()`` vs steady state: ``python bench/first_call.py [-n N]``.

For ResNet-18 and MobileNetV2 (1x3x224x224) and a 6-layer BERT (MiniLM-L6 geometry, batch 1,
sequence 128), each in a fresh process (so no cache survives from another model): build the
model in eval mode, call ``initialize()`` or ``initialize(example)``, then time the first
call and ``N`` more, and print first / median(steady). The bar (issue #15): after
``initialize(example)`` the first call is within 1.5x of the steady-state median.
``--model`` and ``--mode`` run one case in this process (what each fresh process runs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import numpy as np

MODELS = ("resnet18", "mobilenet_v2", "bert")
MODES = ("initialize()", "initialize(example)")


def _build(name):
    from modulekit import models

    if name == "bert":
        cfg = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                   num_attention_heads=12, intermediate_size=1536,
                   max_position_embeddings=512, type_vocab_size=2)
        model = models.BertModel(cfg).eval()
        ids = np.random.default_rng(0).integers(1000, 30000, (1, 128))
        return model, (ids,)
    model = getattr(models, name)().eval()
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)
    return model, (x,)


def run_case(name, mode, n):
    """Seconds of (initialize, first call, the n calls after it) in this process."""
    model, example = _build(name)
    t0 = time.perf_counter()
    if mode == "initialize(example)":
        model.initialize(*example)
    else:
        model.initialize()
    t1 = time.perf_counter()
    model(*example)
    first = time.perf_counter() - t1
    steady = []
    for _ in range(n):
        t = time.perf_counter()
        model(*example)
        steady.append(time.perf_counter() - t)
    return {"initialize": t1 - t0, "first": first, "steady": steady}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20, help="steady-state calls (20)")
    parser.add_argument("--model", choices=MODELS, help="run one case here, print JSON")
    parser.add_argument("--mode", choices=MODES, default=MODES[1])
    args = parser.parse_args(argv)
    if args.model:
        print(json.dumps(run_case(args.model, args.mode, args.n)))
        return 0
    print(f"{'model':<13} {'mode':<20} {'initialize':>10} {'first':>9} {'steady':>9} "
          f"{'first/steady':>12}")
    for name in MODELS:
        for mode in MODES:
            out = subprocess.run(
                [sys.executable, __file__, "--model", name, "--mode", mode, "-n", str(args.n)],
                check=True, capture_output=True, text=True,
            )
            r = json.loads(out.stdout.splitlines()[-1])
            med = statistics.median(r["steady"])
            print(f"{name:<13} {mode:<20} {r['initialize'] * 1e3:8.1f}ms "
                  f"{r['first'] * 1e3:7.1f}ms {med * 1e3:7.1f}ms {r['first'] / med:11.2f}x")
    print("bar: first call after initialize(example) <= 1.5x the steady-state median")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Eager vs compiled (``Module.compile()``) per-call time and Module.__call__ dispatches, at
batch 1, for the user-written ResNet-18, MobileNetV2 and BERT of tests/user_models.py; then
each user-written model, compiled, against the built-in ``modulekit.models`` one with the same
weights: ResNet-18 and MobileNetV2 at 224x224, BERT at MiniLM-L6 size (6 layers, hidden 384,
12 heads) with sequence 128, each at batch 1 and 8 (the bar: user/built-in speed >= 0.95).

    python bench/compile.py [--threads N] [--rounds R] [--only-builtin]

Interleaved timing (modulekit.bench._timing.interleaved): eager and compiled alternate round
by round, so the machine's drift hits both alike.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import user_models as um  # noqa: E402

import modulekit as mk  # noqa: E402
from modulekit.bench._timing import interleaved  # noqa: E402
from modulekit.module import Module  # noqa: E402


def dispatches(fn):
    """Module.__call__ invocations in one call of ``fn``."""
    count = [0]
    original = Module.__call__

    def counting(self, *args, **kwargs):
        count[0] += 1
        return original(self, *args, **kwargs)

    Module.__call__ = counting
    try:
        fn()
    finally:
        Module.__call__ = original
    return count[0]


def cases(size):
    rng = np.random.default_rng(0)
    img = rng.standard_normal((1, 3, size, size)).astype(np.float32)
    ids = rng.integers(0, 1000, (1, 16))
    return [
        ("resnet18", um.ResNet(num_classes=1000), (img,)),
        ("mobilenet_v2", um.MobileNetV2(num_classes=1000), (img,)),
        ("bert (64 wide, 2 layers, seq 16)", um.BertModel(um.BERT_CONFIG),
         (ids, np.ones((1, 16), np.int64))),
    ]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--size", type=int, default=224, help="image side for the CNNs")
    p.add_argument("--only-builtin", action="store_true",
                   help="only the user models against the built-in ones")
    a = p.parse_args()
    mk.set_num_threads(a.threads)
    for name, model, args in ([] if a.only_builtin else cases(a.size)):
        eager = model.eval().initialize()
        compiled = copy.deepcopy(eager)
        compiled.compile()
        for _ in range(2):
            compiled(*args)
        ref = eager(*args)
        out = compiled(*args)
        diff = max(float(np.abs(x - y).max()) for x, y in zip(
            ref if isinstance(ref, tuple) else (ref,), out if isinstance(out, tuple) else (out,)))
        number = 20 if "bert" in name else 3

        def run_eager(m=eager, inputs=args):
            return m(*inputs)

        def run_compiled(m=compiled, inputs=args):
            return m(*inputs)

        t = interleaved({"eager": run_eager, "compiled": run_compiled},
                        rounds=a.rounds, number=number)
        e, c = t["eager"]["seconds"], t["compiled"]["seconds"]
        print(f"{name:34s} eager {e * 1e3:8.3f} ms  compiled {c * 1e3:8.3f} ms  "
              f"eager/compiled {e / c:5.3f}  __call__ dispatches {dispatches(run_eager)} -> "
              f"{dispatches(run_compiled)}  max abs diff {diff:.1e}")
    cnns_against_builtin(a.rounds, a.size)
    bert_against_builtin(a.rounds)


def _against(name, builtin, user, args, rounds, number):
    """Time ``user`` (compiled) against ``builtin`` on ``args``, interleaved, after both
    captured and ran their plans; print the speed ratio and the largest difference."""
    for m in (builtin, user):
        m(*args)
        m(*args)
    a, b = builtin(*args), user(*args)
    a, b = (a[0], b[0]) if isinstance(a, tuple) else (a, b)
    diff = float(np.abs(np.asarray(a) - np.asarray(b)).max())
    t = interleaved({"builtin": lambda: builtin(*args), "user": lambda: user(*args)},
                    rounds=rounds, number=number)
    bt, ut = t["builtin"]["seconds"], t["user"]["seconds"]
    print(f"{name}: built-in {bt * 1e3:8.2f} ms  user compiled {ut * 1e3:8.2f} ms  "
          f"user speed / built-in {bt / ut:5.3f}  max abs diff {diff:.1e}")


def cnns_against_builtin(rounds, size):
    """The user-written ResNet-18 and MobileNetV2 (compiled) against the built-in ones (which
    compile themselves), the same random weights and norm statistics."""
    from modulekit import models

    rng = np.random.default_rng(0)
    for name, make_builtin, make_user in (("ResNet-18", models.resnet18, um.ResNet),
                                          ("MobileNetV2", models.mobilenet_v2, um.MobileNetV2)):
        builtin = make_builtin().eval()
        state = {}
        for k, v in builtin.state_dict().items():
            arr = np.asarray(v)
            if k.endswith("running_var"):
                state[k] = rng.uniform(0.5, 1.5, arr.shape).astype(arr.dtype)
            elif arr.dtype.kind == "f":
                state[k] = (rng.standard_normal(arr.shape) * 0.1).astype(arr.dtype)
            else:
                state[k] = arr
        builtin.load_state_dict(state)
        user = make_user().eval()
        user.load_state_dict(state)
        user.compile()
        for b in (1, 8):
            x = rng.standard_normal((b, 3, size, size)).astype(np.float32)
            _against(f"{name} batch {b} {size}x{size}", builtin, user, (x,), rounds,
                     3 if b == 1 else 1)


MINILM = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
              intermediate_size=1536, max_position_embeddings=512, type_vocab_size=2,
              layer_norm_eps=1e-12)


def bert_against_builtin(rounds):
    """The user-written BERT (compiled) against the built-in BertModel, the same weights, a
    padded attention mask (both apply it), interleaved."""
    from modulekit.models import BertModel

    builtin = BertModel(MINILM)
    user = um.BertModel(MINILM)
    user.load_state_dict({k: v for k, v in builtin.state_dict().items()
                          if k in user.state_dict()})
    user.compile()
    builtin.eval().initialize()
    user.eval().initialize()
    for b, seq in ((1, 128), (8, 128)):
        rng = np.random.default_rng(0)
        ids = rng.integers(0, MINILM["vocab_size"], (b, seq))
        mask = np.ones((b, seq), np.int64)
        mask[0, seq - 5:] = 0
        _against(f"MiniLM-L6 batch {b} seq {seq}", builtin, user, (ids, mask), rounds,
                 3 if b >= 8 else 10)


if __name__ == "__main__":
    main()

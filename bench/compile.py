"""Eager vs compiled (``Module.compile()``) per-call time and Module.__call__ dispatches, at
batch 1, for the user-written ResNet-18, MobileNetV2 and BERT of tests/user_models.py; then the
user-written BERT, compiled, against the built-in ``modulekit.models.BertModel`` at
MiniLM-L6 size (6 layers, hidden 384, 12 heads), batch 1 and 8, sequence 128 (the bar:
user/built-in speed >= 0.95).

    python bench/compile.py [--threads N] [--rounds R] [--only-bert]

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
    p.add_argument("--only-bert", action="store_true",
                   help="only the user BERT against the built-in one")
    a = p.parse_args()
    mk.set_num_threads(a.threads)
    for name, model, args in ([] if a.only_bert else cases(a.size)):
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
    bert_against_builtin(a.rounds)


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
        for m in (builtin, user):  # captures, then the plans
            m(ids, mask)
            m(ids, mask)
        diff = np.abs(builtin(ids, mask).last_hidden_state - user(ids, mask)[0]).max()
        t = interleaved({"builtin": lambda i=ids, k=mask: builtin(i, k),
                         "user": lambda i=ids, k=mask: user(i, k)},
                        rounds=rounds, number=3 if b >= 8 else 10)
        bt, ut = t["builtin"]["seconds"], t["user"]["seconds"]
        print(f"MiniLM-L6 batch {b} seq {seq}: built-in {bt * 1e3:8.2f} ms  user compiled "
              f"{ut * 1e3:8.2f} ms  user speed / built-in {bt / ut:5.3f}  max abs diff "
              f"{diff:.1e}")


if __name__ == "__main__":
    main()

"""BERT encoder of MiniLM-L6 size against transformers (torch) and onnxruntime.

``python -m modulekit.bench bert [--quick]`` (or ``python bench/bert.py``): 6 layers, hidden
384, 12 heads, intermediate 1536 (all-MiniLM-L6-v2's shape, random weights), at batch 1 with
sequence 32 and 128 and batch 32 with sequence 128; modulekit loads the checkpoint that
transformers' ``save_pretrained`` wrote. Peers run with the same thread count, interleaved
round by round, with an untimed 50 ms pause before each library's turn (as the conv and
model benches do: onnxruntime's spinning workers otherwise slow the next library's calls).
onnxruntime is optional: the model is exported with ``torch.onnx.export``
(skipped with a message if that fails offline). Targets: batch 32 seq 128 and batch 1
seq 32 at <= 0.8x onnxruntime's time. When one is missed the per-layer profile is printed.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings

import numpy as np

import modulekit as mk
from modulekit.bench._timing import interleaved, report, with_ratios
from modulekit.bench.conv import PAUSE
from modulekit.models.bert import BertModel

CONFIG = dict(
    vocab_size=30522,
    hidden_size=384,
    num_hidden_layers=6,
    num_attention_heads=12,
    intermediate_size=1536,
    max_position_embeddings=512,
    type_vocab_size=2,
)
#: BERT-base's shape (hidden 768, 12 layers, 12 heads, FFN 3072), for the bf16 and int8 suites
BERT_BASE = dict(CONFIG, hidden_size=768, num_hidden_layers=12, intermediate_size=3072)
CASES = [(1, 32), (1, 128), (32, 128)]
BARS = {(32, 128): 0.8, (1, 32): 0.8}  # modulekit time <= bar x onnxruntime's


def _case(batch, seq):
    return f"MiniLM-L6 batch {batch} seq {seq}"


def flops(batch, seq, config=None):
    """Floating-point operations of one encoder forward (``config``: CONFIG by default)."""
    config = config or CONFIG
    h, i, n = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    per_token = 2 * (4 * h * h + 2 * h * i) + 2 * 2 * seq * h  # projections, FFN, attention
    return n * batch * seq * per_token


def _export_onnx(hf, torch, path):
    class Wrapped(torch.nn.Module):  # positional inputs, tuple outputs
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )
            return out.last_hidden_state, out.pooler_output

    ids = torch.ones((2, 8), dtype=torch.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Wrapped(hf).eval(),
            (ids, torch.ones_like(ids), torch.zeros_like(ids)),
            path,
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["last_hidden_state", "pooler_output"],
            dynamic_axes={
                k: {0: "batch", 1: "seq"} for k in ("input_ids", "attention_mask", "token_type_ids")
            },
            opset_version=17,
            dynamo=False,
        )


def setup(tmp, seed=0, config=None, onnx=True):
    """``(modulekit model, transformers model, onnxruntime session or None, why no session)``:
    a random MiniLM-L6-sized BERT (or one of ``config``, a ``BertConfig``'s keywords) saved by
    transformers into the folder ``tmp`` and loaded by modulekit, and (``onnx``) its
    onnxruntime export."""
    import torch
    import transformers

    threads = mk.get_num_threads()
    torch.set_num_threads(threads)
    torch.set_grad_enabled(False)
    torch.manual_seed(seed)
    hf = transformers.BertModel(transformers.BertConfig(**(config or CONFIG))).eval()
    hf.save_pretrained(tmp)
    model = BertModel.from_pretrained(tmp).initialize()
    sess, ort_error = None, None
    if not onnx:
        return model, hf, None, "onnxruntime peer not asked for"
    try:
        import onnxruntime as ort

        path = os.path.join(tmp, "bert.onnx")
        _export_onnx(hf, torch, path)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # optional peer: any failure means "skip it"
        ort_error = f"onnxruntime peer skipped: {type(exc).__name__}: {exc}"[:200]
        print(ort_error, file=sys.stderr)
    return model, hf, sess, ort_error


def run(quick=False):
    import torch
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model, hf, sess, ort_error = setup(tmp)
        rng = np.random.default_rng(0)
        cases = [(1, 32), (2, 64)] if quick else CASES
        for batch, seq in cases:
            ids = rng.integers(1000, CONFIG["vocab_size"], (batch, seq))
            mask = np.ones((batch, seq), np.int64)
            tt = np.zeros((batch, seq), np.int64)
            tids, tmask, ttt = (torch.from_numpy(a) for a in (ids, mask, tt))
            ours = model(ids, mask, tt).last_hidden_state
            ref = hf(input_ids=tids, attention_mask=tmask, token_type_ids=ttt)
            diff = float(np.abs(ours - ref.last_hidden_state.numpy()).max())
            if diff > 1e-3:
                raise AssertionError(f"bert bench: modulekit differs from transformers by {diff}")
            tkw = dict(input_ids=tids, attention_mask=tmask, token_type_ids=ttt)
            funcs = {
                "modulekit": lambda a=(ids, mask, tt): model(*a),
                "transformers (torch)": lambda kw=tkw: hf(**kw),
            }
            if sess is not None:
                feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": tt}
                funcs["onnxruntime"] = lambda f=feed: sess.run(None, f)
            work = batch * seq
            number = max(1, 2048 // work) if not quick else max(1, 256 // work)
            # a pause before each library's turn lets the previous one's spinning worker
            # threads park (onnxruntime's take a core for tens of ms after a run)
            res = interleaved(funcs, rounds=3 if quick else 9, number=number, pause=PAUSE)
            case = _case(batch, seq)
            work_flops = flops(batch, seq)
            for impl, stats in res.items():
                rows.append(
                    dict(
                        suite="bert",
                        case=case,
                        impl=impl,
                        gflops=work_flops / stats["seconds"] / 1e9,
                        **stats,
                    )
                )
            if sess is None:
                rows.append(dict(suite="bert", case=case, impl="onnxruntime", error=ort_error))
            rows[-len(res)]["max_abs_diff_vs_transformers"] = diff
        with_ratios(rows)
        for (batch, seq), bar in BARS.items():
            ort_row = next(
                (
                    r
                    for r in rows
                    if r["case"] == _case(batch, seq)
                    and r["impl"] == "onnxruntime"
                    and r.get("speedup")
                ),
                None,
            )
            if ort_row is not None and 1.0 / ort_row["speedup"] > bar:
                ids = rng.integers(1000, CONFIG["vocab_size"], (batch, seq))
                mask = np.ones((batch, seq), np.int64)
                print(
                    f"\nbar missed for {_case(batch, seq)}: modulekit at "
                    f"{1.0 / ort_row['speedup']:.2f}x onnxruntime's time (bar {bar}x); "
                    "per-layer profile:"
                )
                print(mk.profile(model, ids, mask, repeat=3, warmup=1).table(row_limit=25))
    return rows


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    report(run(quick="--quick" in argv))


if __name__ == "__main__":
    main()

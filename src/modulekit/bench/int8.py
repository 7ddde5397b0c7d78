"""int8 quantization (dynamic and static) against torch's and onnxruntime's, in one run.

``python -m modulekit.bench int8 [--quick]`` (or ``python bench/int8.py``). Cases:

``Linear int8 <in>-><out> batch <b>``
    the Linear shapes of the bfloat16/int8 issue (4096->4096 batch 64, 1024->1024 batch 1024,
    384->1536 batch 256: MiniLM's feed-forward): modulekit's ``quantize_dynamic`` layer
    against torch's ``torch.ao.quantization.quantize_dynamic`` (fbgemm) and onnxruntime's
    ``onnxruntime.quantization.quantize_dynamic`` of a MatMul + Add graph; the row
    ``modulekit float32`` is the unquantized layer (a reference, not a competitor).
``ResNet-18 int8 static batch 1``, ``MobileNetV2 int8 static batch 1``
    the models of the ``models`` suite (random torch weights with norm statistics, 224x224;
    ResNet-18 alone with ``--quick``) quantized with calibrated activation ranges (32 random images)
    by each library: modulekit's ``quantize_static`` then ``compile()``, onnxruntime's
    ``quantize_static`` (QDQ, per-channel int8 weights, uint8 activations, MinMax) and torch's FX
    graph mode (``prepare_fx``/``convert_fx``, the x86 backend's default qconfig). Each row records
    ``top1_vs_float32``: how often its top-1 class is float32 modulekit's on 256 fixed random images
    (32 with ``--quick``).
``MiniLM int8 batch <b> seq <s>``, ``BERT-base int8 batch 8 seq 128``
    the MiniLM-L6-sized BERT of the ``bert`` suite and a BERT-base-sized one (hidden 768, 12
    layers, FFN 3072; not with ``--quick``), random weights, quantized by each
    library's ``quantize_dynamic``. Each row records ``cosine_vs_float32``: the smallest
    cosine similarity between a token's float32 and int8 hidden states (no real weights can
    be fetched here, so this measures the scheme on random weights, not on real sentences).

Ratios are peer time / modulekit time, interleaved round by round (``_timing.interleaved``).
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings

import numpy as np

from modulekit.bench._timing import interleaved
from modulekit.bench.conv import PAUSE

SUITE = "int8"
LINEARS = ((4096, 4096, 64), (1024, 1024, 1024), (384, 1536, 256))


def _ort_quantized(path, threads):
    """An onnxruntime session of ``path`` quantized by onnxruntime's quantize_dynamic."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    qpath = path.replace(".onnx", ".int8.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_dynamic(path, qpath, weight_type=QuantType.QInt8)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(qpath, opts, providers=["CPUExecutionProvider"])


def _linear_onnx(w, b, path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("MatMul", ["x", "wt"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["y"])]
    graph = helper.make_graph(
        nodes, "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", w.shape[1]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", w.shape[0]])],
        [numpy_helper.from_array(np.ascontiguousarray(w.T), "wt"),
         numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def _torch_quantized(module):
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(module, {torch.nn.Linear},
                                                      dtype=torch.qint8)


def _linears(quick, tmp, threads):
    import torch

    import modulekit as mk
    from modulekit.quantization import quantize_dynamic

    rows = []
    rng = np.random.default_rng(0)
    for k, n, batch in LINEARS[2:] if quick else LINEARS:
        case = f"Linear int8 {k}->{n} batch {batch}"
        lin = mk.nn.Linear(k, n)
        w = lin.weight.numpy().copy()
        b = lin.bias.numpy().copy()
        q = quantize_dynamic(mk.nn.Sequential(lin))
        x = rng.standard_normal((batch, k)).astype(np.float32)
        tl = torch.nn.Linear(k, n)
        tl.weight.data, tl.bias.data = torch.from_numpy(w), torch.from_numpy(b)
        tq = _torch_quantized(torch.nn.Sequential(tl).eval())
        xt = torch.from_numpy(x)
        funcs = {"modulekit": lambda q=q, x=x: q(x), "torch": lambda tq=tq, xt=xt: tq(xt),
                 "modulekit float32": lambda lin=lin, x=x: lin(x)}
        try:
            path = os.path.join(tmp, f"linear{k}x{n}.onnx")
            _linear_onnx(w, b, path)
            sess = _ort_quantized(path, threads)
            funcs["onnxruntime"] = lambda sess=sess, x=x: sess.run(None, {"x": x})
        except Exception as exc:  # optional peer: any failure means "skip it"
            print(f"onnxruntime peer skipped: {type(exc).__name__}: {exc}"[:200],
                  file=sys.stderr)
        res = interleaved(funcs, rounds=3 if quick else 9, min_time=0.02 if quick else 0.1,
                          pause=PAUSE)
        for impl, stats in res.items():
            rows.append(dict(suite=SUITE, case=case, impl=impl,
                             gops=2.0 * batch * k * n / stats["seconds"] / 1e9, **stats))
    return rows


def _encoder(name, config, cases, quick, tmp, threads):
    """The ``<name> int8 batch <b> seq <s>`` rows of one BERT-shaped encoder."""
    import torch

    from modulekit.bench import bert
    from modulekit.quantization import quantize_dynamic

    tmp = os.path.join(tmp, name)
    model, hf, sess, ort_error = bert.setup(tmp, config=config)
    q = quantize_dynamic(model)
    tq = _torch_quantized(hf)
    qsess = None
    if sess is not None:
        try:
            qsess = _ort_quantized(os.path.join(tmp, "bert.onnx"), threads)
        except Exception as exc:  # optional peer
            ort_error = f"onnxruntime peer skipped: {type(exc).__name__}: {exc}"[:200]
    rows = []
    rng = np.random.default_rng(0)
    for batch, seq in cases:
        case = f"{name} int8 batch {batch} seq {seq}"
        ids = rng.integers(1000, config["vocab_size"], (batch, seq))
        mask = np.ones((batch, seq), np.int64)
        tt = np.zeros((batch, seq), np.int64)
        ref = model(ids, mask, tt).last_hidden_state.reshape(-1, config["hidden_size"])
        tkw = {k: torch.from_numpy(v) for k, v in
               (("input_ids", ids), ("attention_mask", mask), ("token_type_ids", tt))}
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": tt}
        outs = {"modulekit": q(ids, mask, tt).last_hidden_state,
                "torch": tq(**tkw).last_hidden_state.numpy()}
        funcs = {"modulekit": lambda a=(ids, mask, tt): q(*a),
                 "torch": lambda kw=tkw: tq(**kw)}
        if qsess is not None:
            outs["onnxruntime"] = qsess.run(None, feed)[0]
            funcs["onnxruntime"] = lambda f=feed: qsess.run(None, f)
        res = interleaved(funcs, rounds=3 if quick else 9, min_time=0.02 if quick else 0.2,
                          pause=PAUSE)
        for impl, stats in res.items():
            got = np.asarray(outs[impl]).reshape(ref.shape)
            cos = (ref * got).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
            rows.append(dict(suite=SUITE, case=case, impl=impl,
                             cosine_vs_float32=float(cos.min()), **stats))
        if qsess is None:
            rows.append(dict(suite=SUITE, case=case, impl="onnxruntime", error=ort_error))
    return rows


def _cnn_static(name, quick, tmp, threads):
    import torch

    from modulekit.bench import models as model_suite
    from modulekit.quantization import quantize_static

    model, tmodel, _ = model_suite.setup(name)
    rng = np.random.default_rng(1)
    calibration = [rng.standard_normal((8, 3, 224, 224)).astype(np.float32) for _ in range(4)]
    q = quantize_static(model, calibration)
    q.compile()
    peers = {"modulekit": q}
    errors = {}
    try:
        peers["onnxruntime"] = _ort_static(tmodel, calibration, tmp, threads, name)
    except Exception as exc:  # optional peer
        errors["onnxruntime"] = f"onnxruntime peer skipped: {type(exc).__name__}: {exc}"[:200]
    try:
        from torch.ao.quantization import get_default_qconfig_mapping
        from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

        example = (torch.from_numpy(calibration[0]),)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prepared = prepare_fx(tmodel, get_default_qconfig_mapping("x86"), example)
            for batch in calibration:
                prepared(torch.from_numpy(batch))
            tq = convert_fx(prepared)
        peers["torch"] = lambda x, tq=tq: tq(torch.from_numpy(x)).numpy()
    except Exception as exc:  # optional peer
        errors["torch"] = f"torch peer skipped: {type(exc).__name__}: {exc}"[:200]
    images = rng.standard_normal((32 if quick else 256, 3, 224, 224)).astype(np.float32)
    ref = np.concatenate([model(images[i:i + 32]) for i in range(0, len(images), 32)])
    x = images[:1]
    funcs = {impl: (lambda f=f: f(x)) for impl, f in peers.items()}
    res = interleaved(funcs, rounds=3 if quick else 9, min_time=0.02 if quick else 0.2,
                      pause=PAUSE)
    case = f"{name} int8 static batch 1"
    rows = []
    for impl, stats in res.items():
        f = peers[impl]
        got = np.concatenate([np.asarray(f(images[i:i + 32]))
                              for i in range(0, len(images), 32)])
        rows.append(dict(suite=SUITE, case=case, impl=impl,
                         top1_vs_float32=float(np.mean(got.argmax(1) == ref.argmax(1))),
                         **stats))
    rows += [dict(suite=SUITE, case=case, impl=impl, error=err) for impl, err in errors.items()]
    return rows


def _ort_static(tmodel, calibration, tmp, threads, name):
    """``f(x)``: an onnxruntime session of ``tmodel`` quantized by onnxruntime's
    quantize_static (QDQ) on ``calibration``."""
    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    path = os.path.join(tmp, f"{name}.onnx")
    qpath = os.path.join(tmp, f"{name}.qdq.onnx")
    torch.onnx.export(tmodel, (torch.from_numpy(calibration[0][:1]),), path,
                      input_names=["x"], output_names=["y"], dynamo=False, opset_version=17,
                      dynamic_axes={"x": {0: "n"}, "y": {0: "n"}})

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": b} for b in calibration])

        def get_next(self):
            return next(self.feeds, None)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_static(path, qpath, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(qpath, opts, providers=["CPUExecutionProvider"])
    return lambda x: sess.run(None, {"x": x})[0]


def run(quick=False):
    """The Linear, CNN static and MiniLM cases; returns the bench rows."""
    import torch  # the reference models (an ImportError marks the suite skipped)

    import modulekit as mk
    from modulekit.bench import bert

    threads = mk.get_num_threads()
    torch.set_num_threads(threads)
    torch.set_grad_enabled(False)
    with tempfile.TemporaryDirectory() as tmp:
        cnns = ("ResNet-18",) if quick else ("ResNet-18", "MobileNetV2")
        return (_linears(quick, tmp, threads)
                + [row for name in cnns for row in _cnn_static(name, quick, tmp, threads)]
                + _encoder("MiniLM", bert.CONFIG,
                           ((2, 32),) if quick else ((1, 128), (32, 128)), quick, tmp, threads)
                + ([] if quick else _encoder("BERT-base", bert.BERT_BASE, ((8, 128),), quick,
                                             tmp, threads)))


def main(argv=None):
    from modulekit.bench.__main__ import main as bench_main

    return bench_main([SUITE, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()

"""ResNet-18 and MobileNetV2 at 224x224, batch 1 and 32: modulekit vs torch vs onnxruntime.

``python -m modulekit.bench models`` (or ``python bench/models.py [--quick] [--passive]``). The
torch models are the hand-built torchvision architectures of ``tests/test_models.py`` (a
source checkout is needed; torchvision is not importable here) with random weights and
non-trivial BatchNorm statistics. modulekit loads their ``state_dict`` (``strict=True``) and
the outputs are checked to agree before anything is timed; onnxruntime runs the torch model
exported with ``torch.onnx.export`` (omitted when the export fails). Targets:
ResNet-18 batch 1 <= 0.9x onnxruntime's latency, MobileNetV2 batch 1 <= 0.9x, ResNet-18 batch
32 >= 1.0x onnxruntime's throughput. See ``modulekit.bench.conv`` for the pauses between
libraries and the OpenMP wait policy.
"""

from __future__ import annotations

import io
import os
import sys

import numpy as np

from modulekit.bench._timing import interleaved
from modulekit.bench.conv import PAUSE, threads

SUITE = "models"
_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests")


def _onnx_session(tmodel, x):
    try:
        import onnxruntime as ort
        import torch
    except ImportError:
        return None
    buf = io.BytesIO()
    try:
        torch.onnx.export(
            tmodel,
            (torch.from_numpy(x),),
            buf,
            input_names=["x"],
            output_names=["y"],
            dynamo=False,
            opset_version=17,
            dynamic_axes={"x": {0: "n"}, "y": {0: "n"}},
        )
    except Exception as exc:  # the exporter's optional pieces may be missing offline
        print(f"onnx export failed ({type(exc).__name__}: {exc}): no onnxruntime rows")
        return None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads()
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(buf.getvalue(), opts, providers=["CPUExecutionProvider"])


def _reference_models():
    """tests/test_models.py's torch models and helpers (a source checkout is needed)."""
    if os.path.isdir(_TESTS) and _TESTS not in sys.path:
        sys.path.insert(0, _TESTS)
    try:
        import test_models
    except ImportError as exc:  # an installed package without the tests
        raise ImportError(
            f"the torch reference models live in tests/test_models.py: {exc}"
        ) from exc
    return test_models


#: name -> (torch reference builder (given tests/test_models.py), modulekit builder name,
#: FLOPs of one 224x224 image)
MODELS = {
    "ResNet-18": (lambda t: t.TResNet(t.TBasicBlock, [2, 2, 2, 2]), "resnet18", 3.64e9),
    "MobileNetV2": (lambda t: t.TMobileNetV2(), "mobilenet_v2", 0.60e9),
}


def setup(name, seed=0):
    """``(modulekit model, torch model, onnxruntime session or None)`` for one of
    :data:`MODELS`: random torch weights with non-trivial norm statistics, loaded into the
    modulekit model (``strict=True``, eval, initialised) and exported to onnxruntime."""
    import warnings

    import torch

    from modulekit import models

    t = _reference_models()
    tbuild, mbuild, _ = MODELS[name]
    torch.set_grad_enabled(False)
    torch.set_num_threads(threads())
    torch.manual_seed(seed)
    tmodel = t.randomize(tbuild(t))
    model = getattr(models, mbuild)()
    model.load_state_dict(t.roundtrip(tmodel), strict=True)
    model.eval().initialize()
    x = np.random.default_rng(seed).standard_normal((1, 3, 224, 224)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = _onnx_session(tmodel, x)
    return model, tmodel, sess


def run(quick=False):
    """Time both models at batch 1 and 32; returns the bench rows (images/s in ``rate``)."""
    import torch

    rows = []
    rng = np.random.default_rng(0)
    for name, (_, _, flops) in MODELS.items():
        model, tmodel, sess = setup(name)
        for batch in (1,) if quick else (1, 32):
            x = rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)
            xt = torch.from_numpy(x)
            err = float(np.abs(model(x) - tmodel(xt).numpy()).max())
            assert err <= 1e-3, f"{name}: modulekit and torch disagree by {err}"
            funcs = {"modulekit": lambda m=model, x=x: m(x), "torch": lambda m=tmodel, x=xt: m(x)}
            if sess is not None:
                funcs["onnxruntime"] = lambda s=sess, x=x: s.run(None, {"x": x})[0]
            number = 1 if batch == 32 else (3 if quick else 10)
            rounds = 3 if quick else (5 if batch == 32 else 9)
            res = interleaved(funcs, rounds=rounds, number=number, pause=PAUSE)
            for impl, stats in res.items():
                rows.append(
                    dict(
                        suite=SUITE,
                        case=f"{name} batch {batch}",
                        impl=impl,
                        gflops=batch * flops / stats["seconds"] / 1e9,
                        images_per_s=batch / stats["seconds"],
                        max_abs_diff=err,
                        **stats,
                    )
                )
    return rows


def main(argv=None):
    from modulekit.bench.__main__ import main as bench_main

    return bench_main(["models", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()

"""ResNet-18 and MobileNetV2 inference, batch 1 and 32 at 224x224: modulekit vs torch vs
onnxruntime (optional dependencies), interleaved in one run.

Run: ``python bench/models.py [--quick]``. The torch models are the hand-built torchvision
architectures of ``tests/test_models.py`` (torchvision is not importable here) with random
weights and non-trivial BatchNorm statistics; modulekit loads their ``state_dict`` with
``strict=True`` and the outputs are checked to agree before anything is timed. onnxruntime
runs the torch model exported with ``torch.onnx.export`` (skipped when the export fails).
Bars: ResNet-18 batch 1 <= 0.9x onnxruntime's latency, MobileNetV2 batch 1 <= 0.9x,
ResNet-18 batch 32 >= 1.0x onnxruntime's throughput.
"""

from __future__ import annotations

import argparse
import io
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from _common import fmt_time, print_table  # noqa: E402
from conv import passive_wait_policy, settled_interleaved  # noqa: E402

import modulekit as mk  # noqa: E402
from modulekit import models  # noqa: E402


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
        )
    except Exception as exc:  # the exporter's optional pieces may be missing offline
        print(f"onnx export failed ({type(exc).__name__}: {exc}); no onnxruntime figures")
        return None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = mk.get_num_threads()
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(buf.getvalue(), opts, providers=["CPUExecutionProvider"])


def run(quick=False):
    import torch
    from test_models import TBasicBlock, TMobileNetV2, TResNet, randomize, roundtrip

    torch.set_grad_enabled(False)
    torch.set_num_threads(mk.get_num_threads())
    cases = [
        ("ResNet-18", lambda: TResNet(TBasicBlock, [2, 2, 2, 2]), models.resnet18),
        ("MobileNetV2", TMobileNetV2, models.mobilenet_v2),
    ]
    rows = []
    rng = np.random.default_rng(0)
    for name, tbuild, mbuild in cases:
        torch.manual_seed(0)
        tmodel = randomize(tbuild())
        model = mbuild()
        model.load_state_dict(roundtrip(tmodel), strict=True)
        model.eval().initialize()
        for batch in (1, 32):
            x = rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)
            xt = torch.from_numpy(x)
            ref = tmodel(xt).numpy()
            err = float(np.abs(model(x) - ref).max())
            assert err <= 1e-3, f"{name}: modulekit and torch disagree by {err}"
            funcs = {
                "modulekit": lambda m=model, x=x: m(x),
                "torch": lambda m=tmodel, x=xt: m(x),
            }
            sess = _onnx_session(tmodel, x) if batch == 1 or not quick else None
            if sess is not None:
                funcs["onnxruntime"] = lambda s=sess, x=x: s.run(None, {"x": x})[0]
            number = 1 if batch == 32 else (5 if quick else 20)
            rounds = 3 if quick else (5 if batch == 32 else 9)
            res = settled_interleaved(funcs, rounds=rounds, number=number)
            row = {"case": f"{name} batch {batch}", "max|diff|": f"{err:.1e}"}
            for lib, r in res.items():
                row[lib] = f"{fmt_time(r['median'])} ({batch / r['median']:7.1f} img/s)"
            for peer in ("torch", "onnxruntime"):
                if peer in res:
                    ratio = res["modulekit"]["median"] / res[peer]["median"]
                    row[f"vs {peer}"] = f"{ratio:.2f}x"
            rows.append(row)
    print_table(
        f"CNN inference, float32, 224x224, {mk.get_num_threads()} threads "
        "(vs peer = modulekit time / peer time: < 1 means modulekit is faster)",
        rows,
        [
            ("case", "case"),
            ("modulekit", "modulekit"),
            ("torch", "torch"),
            ("onnxruntime", "onnxruntime"),
            ("vs torch", "vs torch"),
            ("vs onnxruntime", "vs onnxruntime"),
            ("max|diff|", "max|diff| vs torch"),
        ],
    )
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument(
        "--spin",
        action="store_true",
        help="keep OpenMP's default wait policy (else PASSIVE unless set)",
    )
    args = parser.parse_args(argv)
    if not args.spin:
        passive_wait_policy()
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(default)')}")
    run(quick=args.quick)


if __name__ == "__main__":
    main()

"""Convolution kernels against torch (and onnxruntime when installed), batch 1.

Run: ``python bench/conv.py [--quick]``. Cases (NCHW float32, batch 1):

- conv3x3 64->64 at 56x56, stride 1, pad 1 (bar: >= 1.0x torch's GFLOP/s);
- depthwise 3x3 over 144 channels at 56x56, stride 1 and stride 2;
- conv1x1 256->64 at 56x56.

Every case is timed for each library in the same run, alternating round by round
(``_common.interleaved``), bias and a fused ReLU included for all of them. GFLOP/s counts
2 * C_out * OH * OW * C_in/groups * KH * KW. Two OpenMP runtimes live in one process here
(torch's bundled libgomp and the system one modulekit links): each one's idle threads spin
for a while after a parallel region and steal the other's cores on a 2-core machine, so each
library's turn starts after a short pause (outside the timed region) that lets them park.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import fmt_time, per_call, print_table  # noqa: E402

import modulekit as mk  # noqa: E402
from modulekit._ext import _conv  # noqa: E402

# name, C_in, C_out, kernel, stride, padding, groups, H
CASES = [
    ("conv3x3 64->64 56x56", 64, 64, 3, 1, 1, 1, 56),
    ("dwconv3x3 144 56x56 s1", 144, 144, 3, 1, 1, 144, 56),
    ("dwconv3x3 144 56x56 s2", 144, 144, 3, 2, 1, 144, 56),
    ("conv1x1 256->64 56x56", 256, 64, 1, 1, 0, 1, 56),
]


def _onnx_conv(w, b, stride, pad, groups):
    """An onnxruntime session running Conv + Relu with these weights, or None."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    nodes = [
        helper.make_node(
            "Conv", ["x", "w", "b"], ["c"], strides=[stride, stride], pads=[pad] * 4, group=groups
        ),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 9)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = mk.get_num_threads()
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess


def settled_interleaved(funcs, rounds, number, settle=0.05):
    """``_common.interleaved`` with a pause before each library's turn (outside the timing).

    The pause lets the previous library's spinning worker threads (libgomp, onnxruntime's
    pool) park, so no library is timed while another one's idle threads hold the 2 cores.
    """
    for fn in funcs.values():
        per_call(fn, 2)
    samples = {name: [] for name in funcs}
    for _ in range(rounds):
        for name, fn in funcs.items():
            time.sleep(settle)
            samples[name].append(per_call(fn, number))
    out = {}
    for name, values in samples.items():
        values.sort()
        q = len(values) // 4
        out[name] = {"median": statistics.median(values), "low": values[q], "high": values[-1 - q]}
    return out


def run(quick=False):
    """Time every case; returns the table rows (dicts)."""
    rng = np.random.default_rng(0)
    try:
        import torch

        torch.set_grad_enabled(False)
        torch.set_num_threads(mk.get_num_threads())
    except ImportError:
        torch = None
        print("torch is not installed: modulekit figures only")
    rows = []
    for name, cin, cout, k, s, p, g, h in CASES:
        x = rng.standard_normal((1, cin, h, h)).astype(np.float32)
        w = (rng.standard_normal((cout, cin // g, k, k)) / np.sqrt(cin // g * k * k)).astype(
            np.float32
        )
        b = rng.standard_normal(cout).astype(np.float32)
        packed = _conv.pack_conv2d(w, b, stride=s, padding=p, groups=g)
        oh = (h + 2 * p - k) // s + 1
        flops = 2.0 * cout * oh * oh * (cin // g) * k * k
        funcs = {"modulekit": lambda packed=packed, x=x: packed.forward(x, "relu")}
        ref = None
        if torch is not None:
            targs = (torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), s, p, 1, g)
            F = torch.nn.functional
            funcs["torch"] = lambda F=F, a=targs: F.relu(F.conv2d(*a))
            ref = funcs["torch"]().numpy()
        sess = _onnx_conv(w, b, s, p, g)
        if sess is not None:
            funcs["onnxruntime"] = lambda sess=sess, x=x: sess.run(None, {"x": x})[0]
        if ref is not None:  # the libraries must agree before they are timed
            np.testing.assert_allclose(funcs["modulekit"](), ref, rtol=1e-3, atol=1e-3)
        res = settled_interleaved(funcs, rounds=3 if quick else 9, number=3 if quick else 15)
        row = {"case": name}
        for lib, r in res.items():
            row[lib] = f"{flops / r['median'] / 1e9:6.1f} GF/s {fmt_time(r['median'])}"
        for peer in ("torch", "onnxruntime"):
            if peer in res:
                row[f"vs {peer}"] = f"{res[peer]['median'] / res['modulekit']['median']:.2f}x"
        rows.append(row)
    print_table(
        f"Convolutions, batch 1, float32, {mk.get_num_threads()} threads, ISA "
        f"{_isa_name()} (vs peer = peer time / modulekit time: > 1 means modulekit is faster)",
        rows,
        [
            ("case", "case"),
            ("modulekit", "modulekit"),
            ("torch", "torch"),
            ("onnxruntime", "onnxruntime"),
            ("vs torch", "vs torch"),
            ("vs onnxruntime", "vs onnxruntime"),
        ],
    )
    return rows


def _isa_name():
    from modulekit._ext import _isa

    return _isa.get_isa()


def passive_wait_policy():
    """Re-exec with ``OMP_WAIT_POLICY=PASSIVE`` unless a policy is set already.

    On a loaded 2-core machine, libgomp's spinning waiters (torch's and modulekit's alike)
    hold a core while the thread they wait for is queued behind other processes, and single
    calls then take 10-30x longer at random. Passive waiting makes the figures repeatable;
    it applies to both OpenMP runtimes in the process (onnxruntime has its own pool).
    """
    if "OMP_WAIT_POLICY" not in os.environ:
        env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


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

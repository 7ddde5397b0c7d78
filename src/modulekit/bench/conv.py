"""Convolution kernels against torch and onnxruntime (optional peers), batch 1, float32.

``python -m modulekit.bench conv`` (or ``python bench/conv.py [--quick] [--passive]``). Cases:

- conv3x3 64->64 at 56x56, stride 1, pad 1 (target: >= 1.0x torch's GFLOP/s);
- depthwise 3x3 over 144 channels at 56x56, stride 1 and stride 2;
- conv1x1 256->64 at 56x56;
- conv3x3 256->256 at 14x14 and 512->512 at 7x7 (ResNet-18's deep layers: Winograd F(4x4)
  and F(2x2) at batch 1, weights streaming from memory);
- layers (``modulekit.nn`` against ``torch.nn``, same weights, batch as stated, no bias as in
  the models): ``Conv1d`` 512->512 k3 s2 over 3199 samples (wav2vec2-base's second feature
  encoder layer on one second of 16 kHz audio: the first layer, k10 s5, leaves 3199) and
  ``ConvTranspose2d`` 256->128 k4 s2 p1, 16x16 -> 32x32 at batch 8 (a DCGAN generator's
  upsampling layer); target >= 1.0x torch for both;
- one MobileNetV2 inverted-residual block at 112x112: 1x1 16->96 + ReLU6, depthwise 3x3
  stride 2 + ReLU6, 1x1 96->24 (``_conv.depthwise_chain``, fused in row bands), the second
  block of the network and its heaviest; GFLOP/s counts the three convolutions.

Bias and a ReLU are fused for modulekit and included for the peers. GFLOP/s counts
2 * C_out * OH * OW * C_in/groups * KH * KW. Each library's turn starts after a 50 ms pause
outside the timed region: two OpenMP runtimes (torch's bundled libgomp and the one modulekit
links) and onnxruntime's pool live in one process, and on a 2-core machine one library's
spinning idle workers would otherwise hold the cores during the next one's turn. On a loaded
machine, ``--passive`` (``OMP_WAIT_POLICY=PASSIVE``) keeps spinning waiters from making single
calls 10-30x slower at random.
"""

from __future__ import annotations

import sys

import numpy as np

from modulekit.bench._timing import interleaved

SUITE = "conv"
PAUSE = 0.05  # seconds before each library's turn (see above)

# case, C_in, C_out, kernel, stride, padding, groups, H
CASES = [
    ("conv3x3 64->64 56x56", 64, 64, 3, 1, 1, 1, 56),
    ("dwconv3x3 144 56x56 s1", 144, 144, 3, 1, 1, 144, 56),
    ("dwconv3x3 144 56x56 s2", 144, 144, 3, 2, 1, 144, 56),
    ("conv1x1 256->64 56x56", 256, 64, 1, 1, 0, 1, 56),
    ("conv3x3 256->256 14x14", 256, 256, 3, 1, 1, 1, 14),
    ("conv3x3 512->512 7x7", 512, 512, 3, 1, 1, 1, 7),
]


def threads():
    import modulekit

    return modulekit.get_num_threads()


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
    opts.intra_op_num_threads = threads()
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _onnx_invres(we, be, wd, bd, wp, bp, stride):
    """An onnxruntime session running expand/ReLU6, depthwise/ReLU6, project; or None."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    chid = wd.shape[0]
    nodes = [
        helper.make_node("Conv", ["x", "we", "be"], ["e"]),
        helper.make_node("Clip", ["e", "lo", "hi"], ["e6"]),
        helper.make_node(
            "Conv", ["e6", "wd", "bd"], ["d"], strides=[stride] * 2, pads=[1] * 4, group=chid
        ),
        helper.make_node("Clip", ["d", "lo", "hi"], ["d6"]),
        helper.make_node("Conv", ["d6", "wp", "bp"], ["y"]),
    ]
    consts = dict(we=we, be=be, wd=wd, bd=bd, wp=wp, bp=bp)
    init = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    init += [numpy_helper.from_array(np.float32(v), k) for k, v in (("lo", 0.0), ("hi", 6.0))]
    graph = helper.make_graph(
        nodes,
        "invres",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=init,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 9)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads()
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _invres_rows(rng, torch, quick):
    """The MobileNetV2 block row: 16 -> 96 -> 24 channels, 112x112, stride 2."""
    from modulekit._ext import _conv

    cin, chid, cout, h, s = 16, 96, 24, 112, 2
    x = rng.standard_normal((1, cin, h, h)).astype(np.float32)

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)

    we, wd, wp = w(chid, cin, 1, 1), w(chid, 1, 3, 3), w(cout, chid, 1, 1)
    be, bd, bp = (rng.standard_normal(c).astype(np.float32) for c in (chid, chid, cout))
    pe, pd, pp = (
        _conv.pack_conv2d(we, be),
        _conv.pack_conv2d(wd, bd, stride=s, padding=1, groups=chid),
        _conv.pack_conv2d(wp, bp),
    )
    oh = (h - 1) // s + 1
    flops = 2.0 * (chid * h * h * cin + chid * oh * oh * 9 + cout * oh * oh * chid)
    acts = ("relu6", "relu6", None)
    funcs = {"modulekit": lambda: _conv.depthwise_chain(x, pe, pd, pp, acts, False)}
    if torch is not None:
        F = torch.nn.functional
        t = {
            k: torch.from_numpy(v)
            for k, v in dict(we=we, be=be, wd=wd, bd=bd, wp=wp, bp=bp).items()
        }
        xt = torch.from_numpy(x)

        def tblock():
            y = F.relu6(F.conv2d(xt, t["we"], t["be"]))
            y = F.relu6(F.conv2d(y, t["wd"], t["bd"], s, 1, 1, chid))
            return F.conv2d(y, t["wp"], t["bp"])

        funcs["torch"] = tblock
        np.testing.assert_allclose(funcs["modulekit"](), tblock().numpy(), rtol=1e-3, atol=1e-3)
    sess = _onnx_invres(we, be, wd, bd, wp, bp, s)
    if sess is not None:
        funcs["onnxruntime"] = lambda: sess.run(None, {"x": x})[0]
    res = interleaved(funcs, rounds=3 if quick else 9, number=3 if quick else 15, pause=PAUSE)
    return [
        dict(
            suite=SUITE,
            case=f"invres {cin}->{chid}->{cout} {h}x{h} s{s}",
            impl=impl,
            gflops=flops / stats["seconds"] / 1e9,
            **stats,
        )
        for impl, stats in res.items()
    ]


# case, torch.nn class, constructor args, input shape (layers: modulekit.nn vs torch.nn)
LAYER_CASES = [
    ("Conv1d 512->512 k3 s2 L3199 (wav2vec2)", "Conv1d", (512, 512, 3, 2, 0), (1, 512, 3199)),
    ("ConvTranspose2d 256->128 k4 s2 p1 16x16 batch 8 (DCGAN)", "ConvTranspose2d",
     (256, 128, 4, 2, 1), (8, 256, 16, 16)),
]


def _layer_rows(rng, torch, quick):
    """``modulekit.nn`` layers against the same ``torch.nn`` layers (eval, bias=False)."""
    import modulekit.nn as mnn

    rows = []
    for case, name, args, shape in LAYER_CASES:
        x = rng.standard_normal(shape).astype(np.float32)
        layer = getattr(mnn, name)(*args, bias=False)
        layer.initialize()
        weight = layer.state_dict(include_packed=True)["weight"].numpy()
        ks = weight.shape[2:]
        out = layer(x)
        # multiply-adds: every (input pixel, weight) pair of a transposed convolution, every
        # (output pixel, weight) pair of a convolution
        pixels = np.prod(shape[2:]) if name.startswith("ConvT") else np.prod(out.shape[2:])
        flops = 2.0 * shape[0] * pixels * weight.shape[0] * weight.shape[1] * np.prod(ks)
        funcs = {"modulekit": lambda layer=layer, x=x: layer(x)}
        if torch is not None:
            tl = getattr(torch.nn, name)(*args, bias=False).eval()
            tl.load_state_dict({"weight": torch.from_numpy(weight)})
            xt = torch.from_numpy(x)
            funcs["torch"] = lambda tl=tl, xt=xt: tl(xt)
            np.testing.assert_allclose(out, tl(xt).numpy(), rtol=1e-3, atol=1e-3)
        res = interleaved(funcs, rounds=3 if quick else 9, number=2 if quick else 5, pause=PAUSE)
        for impl, stats in res.items():
            rows.append(dict(suite=SUITE, case=case, impl=impl,
                             gflops=flops / stats["seconds"] / 1e9, **stats))
    return rows


def run(quick=False):
    """Time every case for modulekit and each installed peer; returns the bench rows."""
    from modulekit._ext import _conv

    rng = np.random.default_rng(0)
    try:
        import torch

        torch.set_grad_enabled(False)
        torch.set_num_threads(threads())
    except ImportError:
        torch = None
    rows = []
    for case, cin, cout, k, s, p, g, h in CASES:
        x = rng.standard_normal((1, cin, h, h)).astype(np.float32)
        w = (rng.standard_normal((cout, cin // g, k, k)) / np.sqrt(cin // g * k * k)).astype(
            np.float32
        )
        b = rng.standard_normal(cout).astype(np.float32)
        packed = _conv.pack_conv2d(w, b, stride=s, padding=p, groups=g)
        oh = (h + 2 * p - k) // s + 1
        flops = 2.0 * cout * oh * oh * (cin // g) * k * k
        funcs = {"modulekit": lambda packed=packed, x=x: packed.forward(x, "relu")}
        if torch is not None:
            targs = (torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), s, p, 1, g)
            F = torch.nn.functional
            funcs["torch"] = lambda F=F, a=targs: F.relu(F.conv2d(*a))
            # the libraries must agree before they are timed
            np.testing.assert_allclose(
                funcs["modulekit"](), funcs["torch"]().numpy(), rtol=1e-3, atol=1e-3
            )
        sess = _onnx_conv(w, b, s, p, g)
        if sess is not None:
            funcs["onnxruntime"] = lambda sess=sess, x=x: sess.run(None, {"x": x})[0]
        res = interleaved(funcs, rounds=3 if quick else 9, number=3 if quick else 15, pause=PAUSE)
        for impl, stats in res.items():
            rows.append(
                dict(
                    suite=SUITE,
                    case=case,
                    impl=impl,
                    gflops=flops / stats["seconds"] / 1e9,
                    **stats,
                )
            )
    rows += _invres_rows(rng, torch, quick)
    rows += _layer_rows(rng, torch, quick)
    return rows


def main(argv=None):
    from modulekit.bench.__main__ import main as bench_main

    return bench_main(["conv", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()

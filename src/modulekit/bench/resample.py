"""Resampling against torch and onnxruntime (optional peers), float32 NCHW.

``python -m modulekit.bench resample`` (or ``python bench/resample.py [--quick]``). Cases:

- bilinear x2 upsampling (``align_corners=False``) of 1x64x128x128 and 8x64x128x128
  (targets: >= 1.0x torch each);
- nearest x2 upsampling of 1x64x128x128.

modulekit runs ``modulekit.nn.functional.interpolate`` (the tap tables computed per call, the
vectorised C kernels of ``kernels/resample``); torch runs ``torch.nn.functional.interpolate``;
onnxruntime one ``Resize`` node (``half_pixel`` / ``asymmetric`` + ``floor``, the same results).
Each call allocates its output, for every library. GB/s counts the output written and the
input read once.
"""

from __future__ import annotations

import sys

import numpy as np

from modulekit.bench._timing import interleaved

SUITE = "resample"
PAUSE = 0.05  # seconds before each library's turn (see bench/conv.py)

# case, mode, shape
CASES = [
    ("bilinear x2 1x64x128x128", "bilinear", (1, 64, 128, 128)),
    ("bilinear x2 8x64x128x128", "bilinear", (8, 64, 128, 128)),
    ("nearest x2 1x64x128x128", "nearest", (1, 64, 128, 128)),
]


def _onnx_resize(mode):
    """An onnxruntime session resizing by 2 in H and W as torch's ``mode``, or None."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    import modulekit

    if mode == "bilinear":
        attrs = dict(mode="linear", coordinate_transformation_mode="half_pixel")
    else:
        attrs = dict(mode="nearest", coordinate_transformation_mode="asymmetric",
                     nearest_mode="floor")
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[scales])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 9)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = modulekit.get_num_threads()
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def run(quick=False):
    """Time every case for modulekit and each installed peer; returns the bench rows."""
    import modulekit
    from modulekit.nn import functional as F

    rng = np.random.default_rng(0)
    try:
        import torch

        torch.set_grad_enabled(False)
        torch.set_num_threads(modulekit.get_num_threads())
    except ImportError:
        torch = None
    rows = []
    for case, mode, shape in CASES:
        x = rng.standard_normal(shape, dtype=np.float32)
        nbytes = x.nbytes * 5  # read the input once, write 4x its size
        funcs = {"modulekit": lambda x=x, mode=mode: F.interpolate(x, scale_factor=2, mode=mode)}
        if torch is not None:
            tx, interp = torch.from_numpy(x), torch.nn.functional.interpolate
            funcs["torch"] = lambda tx=tx, mode=mode, interp=interp: interp(
                tx, scale_factor=2, mode=mode)
            # the libraries must agree before they are timed
            np.testing.assert_allclose(funcs["modulekit"](), funcs["torch"]().numpy(),
                                       rtol=1e-5, atol=1e-5)
        sess = _onnx_resize(mode)
        if sess is not None:
            funcs["onnxruntime"] = lambda sess=sess, x=x: sess.run(None, {"x": x})[0]
            np.testing.assert_allclose(funcs["modulekit"](), funcs["onnxruntime"](),
                                       rtol=1e-5, atol=1e-5)
        big = shape[0] > 1
        res = interleaved(funcs, rounds=3 if quick else 9,
                          number=(1 if big else 3) if quick else (3 if big else 15),
                          pause=PAUSE)
        for impl, stats in res.items():
            rows.append(dict(suite=SUITE, case=case, impl=impl,
                             gbps=nbytes / stats["seconds"] / 1e9, **stats))
    return rows


def main(argv=None):
    from modulekit.bench.__main__ import main as bench_main

    return bench_main(["resample", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()

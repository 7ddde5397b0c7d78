"""Benchmark of modulekit's packed GEMM engine against NumPy/OpenBLAS, torch and onnxruntime.

Run ``python -m modulekit.bench gemm`` or ``python bench/gemm.py`` (``--quick`` for fewer,
shorter repeats). It prints, per case,
the median time of each peer, GFLOP/s and the ratio ``peer_time / modulekit_time`` (above 1:
modulekit is faster):

- matmul 256^3, 1024^3, 2048^3 float32 (packs both operands per call) vs ``numpy.matmul``;
- a packed Linear, N = K = 512 and 1024, batch 1, 8, 64, 1024: ``PackedLinear.forward`` vs
  NumPy ``x @ W.T + b`` and ``torch.nn.functional.linear`` (torch optional);
- an MLP 784-256-256-10 (ReLU) at batch 1 and 256 vs torch and onnxruntime (optional; the
  ONNX graph is built with ``onnx.helper``): modulekit's side is an ``initialize()``d
  ``nn.Sequential`` called end to end (its Linear layers run as one chained kernel call);
  "modulekit layers" is the same network as three ``PackedLinear.forward`` calls;
- modulekit's matmul 1024^3 on 1 and 2 threads.

The peers' repeats are interleaved (A B C, B C A, ...) and each repeat runs a case for a
minimum time, so spinning thread pools and machine noise hit every peer alike; medians and
quartiles are reported. OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE slow NumPy on this machine: the
bench runner re-executes itself without them, and this suite prints which OpenBLAS kernel ran.
``run(quick=False)`` returns the results as a list of dicts.
"""

import os
import sys

import numpy as np

from modulekit._ext import _gemm, _openmp_helpers
from modulekit.bench._timing import fmt_time, interleaved

_STRIP = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def _optional(name):
    try:
        return __import__(name)
    except ImportError:
        print(f"[{name} not installed: its columns are skipped]")
        return None


def _onnx_mlp(onnx, ort, layers, nthreads):
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, prev = [], [], "x"
    for i, (w, b) in enumerate(layers):
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        out = f"h{i}" if i < len(layers) - 1 else "y"
        gemm_out = out + "_lin" if i < len(layers) - 1 else out
        nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [gemm_out], transB=1))
        if i < len(layers) - 1:
            nodes.append(helper.make_node("Relu", [gemm_out], [out]))
        prev = out
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", layers[0][0].shape[1]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", layers[-1][0].shape[0]])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = nthreads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess


def run(quick=False):
    """Run every case; print a table and return one dict per (case, peer)."""
    repeats, min_time, gap = (3, 0.01, 0.02) if quick else (7, 0.1, 0.1)
    rng = np.random.default_rng(0)
    nthreads = _openmp_helpers.get_num_threads()
    results = []

    try:
        import threadpoolctl

        info = [d for d in threadpoolctl.threadpool_info() if d.get("internal_api") == "openblas"]
        for d in info:
            print(
                f"NumPy BLAS: OpenBLAS {d.get('version')} kernel {d.get('architecture')}, "
                f"{d.get('num_threads')} threads"
            )
    except ImportError:
        print("[threadpoolctl not installed: OpenBLAS kernel unknown]")
    still = [k for k in _STRIP if k in os.environ]
    print(
        f"modulekit threads: {nthreads}"
        + (f"; still set: {', '.join(still)} (run through python -m modulekit.bench to remove "
           "them)" if still else "")
    )
    torch = _optional("torch")
    ort = _optional("onnxruntime")
    onnx = _optional("onnx") if ort is not None else None
    if torch is not None:
        torch.set_num_threads(nthreads)

    def report(case, flops, names, fns):
        """Time ``fns`` against each other, record and print one row per implementation.

        One repeat of a callable lasts about ``min_time`` seconds; before it, an untimed call
        brings its working set back into the caches, after a pause of ``gap`` seconds and
        until the thread pool the previous peer left spinning (OpenBLAS spins ~2^28 cycles,
        onnxruntime and libgomp spin too) has parked."""
        funcs = dict(zip(names, fns))
        res = interleaved(funcs, rounds=repeats, min_time=min_time, setup=funcs, pause=gap,
                          wait_idle=True)
        stats = [res[name] for name in names]
        base = stats[0]["seconds"]
        cells = []
        for name, st in zip(names, stats):
            row = {"suite": "gemm", "case": case, "impl": name, **st}
            if flops:
                row["gflops"] = flops / st["seconds"] / 1e9
            results.append(row)
            gf = f" {row['gflops']:7.1f} GF/s" if flops else ""
            cells.append(f"{name} {fmt_time(st['seconds'])} ({fmt_time(st['low'])}.."
                         f"{fmt_time(st['high'])}){gf} (x{st['seconds'] / base:5.2f})")
        print(f"{case:<28}" + " | ".join(cells))
        return stats

    print("\n-- matmul float32 (ratio: peer time / modulekit time) --")
    for n in (256, 1024) if quick else (256, 1024, 2048):
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        report(f"matmul {n}^3", 2.0 * n**3, ["modulekit", "numpy"],
               [lambda a=a, b=b: _gemm.matmul(a, b), lambda a=a, b=b: np.matmul(a, b)])

    print("\n-- packed Linear float32, y = x @ W.T + b --")
    for nk in (512, 1024):
        w = rng.standard_normal((nk, nk), dtype=np.float32)
        bias = rng.standard_normal(nk, dtype=np.float32)
        packed = _gemm.pack_linear(w, bias)
        tw, tb = (torch.from_numpy(w), torch.from_numpy(bias)) if torch else (None, None)
        for batch in (1, 8, 64, 1024):
            x = rng.standard_normal((batch, nk), dtype=np.float32)
            fns = [
                lambda p=packed, x=x: p.forward(x),
                lambda x=x, w=w, b=bias: x @ w.T + b,
            ]
            names = ["modulekit", "numpy"]
            if torch is not None:

                def torch_linear(x=x, tw=tw, tb=tb):
                    with torch.inference_mode():
                        return torch.nn.functional.linear(torch.from_numpy(x), tw, tb).numpy()

                fns.append(torch_linear)
                names.append("torch")
            report(f"linear {nk}x{nk} batch {batch}", 2.0 * batch * nk * nk, names, fns)

    print("\n-- MLP 784-256-256-10 float32, ReLU --")
    sizes = [(256, 784), (256, 256), (10, 256)]
    layers = [
        (
            (rng.standard_normal(s) / np.sqrt(s[1])).astype(np.float32),
            rng.standard_normal(s[0]).astype(np.float32),
        )
        for s in sizes
    ]
    p1, p2, p3 = (_gemm.pack_linear(w, b) for w, b in layers)

    def mk_layers(x):
        return p3.forward(p2.forward(p1.forward(x, "relu"), "relu"))

    from modulekit import nn

    mk_model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    mk_model.load_state_dict({f"{2 * i}.{name}": arr for i, (w, b) in enumerate(layers)
                              for name, arr in (("weight", w), ("bias", b))})
    mk_model.initialize()
    mk_mlp = mk_model.__call__

    tmodel = None
    if torch is not None:
        tmodel = torch.nn.Sequential(
            torch.nn.Linear(784, 256),
            torch.nn.ReLU(),
            torch.nn.Linear(256, 256),
            torch.nn.ReLU(),
            torch.nn.Linear(256, 10),
        ).eval()
        with torch.no_grad():
            for lin, (w, b) in zip([tmodel[0], tmodel[2], tmodel[4]], layers):
                lin.weight.copy_(torch.from_numpy(w))
                lin.bias.copy_(torch.from_numpy(b))
    sess = _onnx_mlp(onnx, ort, layers, nthreads) if onnx is not None else None
    for batch in (1, 256):
        x = rng.standard_normal((batch, 784), dtype=np.float32)
        ref = mk_mlp(x)
        np.testing.assert_array_equal(mk_layers(x), ref)
        fns, names = [lambda x=x: mk_mlp(x), lambda x=x: mk_layers(x)], [
            "modulekit", "modulekit layers"]
        if tmodel is not None:

            def torch_mlp(x=x):
                with torch.inference_mode():
                    return tmodel(torch.from_numpy(x)).numpy()

            np.testing.assert_allclose(torch_mlp(), ref, rtol=1e-4, atol=1e-4)
            fns.append(torch_mlp)
            names.append("torch")
        if sess is not None:

            def ort_mlp(x=x):
                return sess.run(None, {"x": x})[0]

            np.testing.assert_allclose(ort_mlp(), ref, rtol=1e-4, atol=1e-4)
            fns.append(ort_mlp)
            names.append("onnxruntime")
        flops = 2.0 * batch * sum(w.size for w, _ in layers)
        report(f"mlp batch {batch}", flops, names, fns)

    print("\n-- thread scaling, modulekit matmul 1024^3 --")
    a = rng.standard_normal((1024, 1024), dtype=np.float32)
    b = rng.standard_normal((1024, 1024), dtype=np.float32)

    def with_threads(n):
        def f():
            _openmp_helpers.set_num_threads(n)
            try:
                return _gemm.matmul(a, b)
            finally:
                _openmp_helpers.reset_num_threads()

        return f

    t2, t1 = report("matmul 1024^3 thread scaling", 2.0 * 1024**3,
                    ["modulekit", "modulekit 1 thread"], [with_threads(2), with_threads(1)])
    print(f"speed-up 2 threads / 1 thread: {t1['seconds'] / t2['seconds']:.2f}x")
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return results

    def numpy_one_thread():
        with threadpool_limits(1, user_api="blas"):
            return np.matmul(a, b)

    # one core each: the kernels compared without thread-team effects (robust to a busy box)
    report("matmul 1024^3 one thread", 2.0 * 1024**3, ["modulekit", "numpy"],
           [with_threads(1), numpy_one_thread])
    return results


def main(argv=None):
    from modulekit.bench.__main__ import main as bench_main

    return bench_main(["gemm", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())

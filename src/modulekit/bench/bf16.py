"""bfloat16 compute: ``nn.Linear`` under ``float32_matmul_precision("medium")`` against torch's
bfloat16 Linear (oneDNN; AMX where the CPU has it).

Run ``python -m modulekit.bench bf16`` or ``python bench/bf16.py`` (``--quick``: fewer,
shorter repeats of ``modulekit``, ``modulekit float32`` and ``torch bf16 weights`` only).
Cases: Linear 4096->4096 batch 64, 1024->1024 batch 1024 and 384->1536 batch 256 (MiniLM's
FFN), float32 NumPy input and output on every side:

- ``modulekit``: a float32 ``nn.Linear`` called inside ``float32_matmul_precision("medium")``
  (bfloat16 multiplies, float32 accumulation; its bfloat16 weights packed once, beforehand);
- ``modulekit bf16 weights``: the same layer after ``to(modulekit.bfloat16)``, under "medium";
- ``modulekit float32``: the float32 layer at the default precision ("highest");
- ``torch bf16 weights``: ``torch.nn.Linear`` in bfloat16, the float32 input converted to
  bfloat16 and the output back to a float32 array (what a float32 caller pays);
- ``torch autocast``: the float32 ``torch.nn.Linear`` under ``torch.autocast("cpu",
  torch.bfloat16)`` (casts its weight to bfloat16 on every call), output back to float32;
- ``torch bf16 in/out``: the bfloat16 Linear on a bfloat16 tensor, no conversions (torch's
  floor).

Each case runs again with one thread on each side (``... one thread``): on a busy machine a
thread team waits for a descheduled worker, which costs the libraries differently.

Models (``<model> batch <b> bf16``, float32 NumPy input and output on every side): ResNet-18
and MobileNetV2 at batch 32 (the ``models`` suite's random-weight networks), the MiniLM-L6
and BERT-base encoders at batch 32 and 8, sequence 128 (random weights): ``modulekit``
(the float32 model called under "medium"), ``modulekit float32`` ("highest"), ``torch bf16``
(the torch model in bfloat16, channels-last for the CNNs, oneDNN's fastest layout for them
here; the input converted to bfloat16 and the output back). Each row records the smallest
cosine of its outputs (per image, per token) against modulekit's float32 output.

Before timing, every side's output is checked against float32 within bfloat16's rounding.
The peers' repeats are interleaved (see ``_timing.interleaved``). ``run(quick=False)``
returns the rows.
"""

import os
import sys

import numpy as np

import modulekit
from modulekit._ext import _isa, _openmp_helpers
from modulekit.bench._timing import fmt_time, interleaved

SHAPES = ((4096, 4096, 64), (1024, 1024, 1024), (384, 1536, 256))


def case_name(k, n, m):
    """The row name of Linear ``k -> n`` at batch ``m``."""
    return f"linear {k}->{n} batch {m} bf16"


def run(quick=False):
    """Time every case; print a table and return one dict per (case, implementation)."""
    repeats, min_time, gap = (3, 0.01, 0.0) if quick else (9, 0.1, 0.1)
    nthreads = _openmp_helpers.get_num_threads()
    rng = np.random.default_rng(0)
    results = []
    try:
        import torch
    except ImportError:
        torch = None
        print("[torch not installed: its columns are skipped]")
    if torch is not None:
        torch.set_num_threads(nthreads)
    print(f"modulekit threads: {nthreads}; bfloat16 path: {_isa.get_bf16()} "
          f"(AMX tile state: {_isa.amx_status()})")
    for k, n, m in SHAPES:
        w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        x = rng.standard_normal((m, k)).astype(np.float32)
        state = {"weight": w, "bias": b}
        lin = modulekit.nn.Linear(k, n)
        lin.load_state_dict(state)
        lin16 = modulekit.nn.Linear(k, n)
        lin16.load_state_dict(state)
        lin16.to(modulekit.bfloat16)
        with modulekit.float32_matmul_precision("medium"):
            lin.initialize()  # packs the float32 and the bfloat16 weights now
            lin16.initialize()

        def mk_medium(lin=lin, x=x):
            with modulekit.float32_matmul_precision("medium"):
                return lin(x)

        def mk_medium16(lin=lin16, x=x):
            with modulekit.float32_matmul_precision("medium"):
                return lin(x)

        funcs = {"modulekit": mk_medium, "modulekit bf16 weights": mk_medium16,
                 "modulekit float32": lambda lin=lin, x=x: lin(x)}
        if torch is not None:
            t32 = torch.nn.Linear(k, n)
            with torch.no_grad():
                t32.weight.copy_(torch.from_numpy(w))
                t32.bias.copy_(torch.from_numpy(b))
            t16 = torch.nn.Linear(k, n).to(torch.bfloat16)
            t16.load_state_dict(t32.state_dict())
            xt = torch.from_numpy(x)
            xb = xt.to(torch.bfloat16)

            def torch_bf16(t16=t16, xt=xt):
                with torch.inference_mode():
                    return t16(xt.to(torch.bfloat16)).float().numpy()

            def torch_autocast(t32=t32, xt=xt):
                with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16):
                    return t32(xt).float().numpy()

            def torch_bf16_io(t16=t16, xb=xb):
                with torch.inference_mode():
                    return t16(xb)

            funcs.update({"torch bf16 weights": torch_bf16, "torch autocast": torch_autocast,
                          "torch bf16 in/out": torch_bf16_io})
        if quick:  # the bar's pair and the float32 reference only
            funcs = {name: fn for name, fn in funcs.items()
                     if name in ("modulekit", "modulekit float32", "torch bf16 weights")}
        # every side computes the same layer: within bfloat16's rounding of float32
        want = x.astype(np.float64) @ w.T.astype(np.float64) + b
        scale = np.abs(x) @ np.abs(w).T + np.abs(b)
        for name, fn in funcs.items():
            got = fn()
            got = got.float().numpy() if torch is not None and torch.is_tensor(got) else got
            err = np.max(np.abs(got - want) / (scale + 1e-30))
            if not err < 2.0**-6:
                raise AssertionError(f"bf16 bench: {name} is off by {err:.3g} (relative)")
        flops = 2.0 * m * n * k
        report(results, case_name(k, n, m), flops,
               interleaved(funcs, rounds=repeats, min_time=min_time, setup=funcs, pause=gap,
                           wait_idle=not quick))
        if quick:
            continue
        # one thread each: the kernels compared without thread-team effects (on a busy
        # machine a team waits for a descheduled worker, which costs the peers differently)
        one = {name: fn for name, fn in funcs.items()
               if name in ("modulekit", "torch bf16 weights", "torch bf16 in/out")}
        user = _openmp_helpers.user_threads()
        _openmp_helpers.set_num_threads(1)
        if torch is not None:
            torch.set_num_threads(1)
        try:
            res = interleaved(one, rounds=repeats, min_time=min_time, setup=one, pause=gap,
                              wait_idle=True)
        finally:
            if user:
                _openmp_helpers.set_num_threads(user)
            else:
                _openmp_helpers.reset_num_threads()
            if torch is not None:
                torch.set_num_threads(nthreads)
        report(results, case_name(k, n, m) + " one thread", flops, res)
    return results + _models(quick, nthreads, torch)


def _cosines(ref, got):
    """Smallest cosine between the rows of ``ref`` and ``got`` (flattened per leading row)."""
    ref = np.asarray(ref, np.float64).reshape(-1, ref.shape[-1])
    got = np.asarray(got, np.float64).reshape(ref.shape)
    return float(((ref * got).sum(1) / (np.linalg.norm(ref, axis=1)
                                         * np.linalg.norm(got, axis=1))).min())


def _models(quick, nthreads, torch):
    """The model cases (see the module docstring); [] without torch."""
    if torch is None:
        return []
    import tempfile

    from modulekit.bench import bert
    from modulekit.bench import models as model_suite

    rows = []
    rng = np.random.default_rng(0)
    cases = []
    for name in ("ResNet-18",) if quick else ("ResNet-18", "MobileNetV2"):
        batch = 2 if quick else 32
        model, tmodel, _ = model_suite.setup(name)
        tmodel = tmodel.to(torch.bfloat16).to(memory_format=torch.channels_last)
        x = rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)
        xt = torch.from_numpy(x)

        def torch_cnn(tmodel=tmodel, xt=xt):
            with torch.inference_mode():
                xb = xt.to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
                return tmodel(xb).float().numpy()

        cases.append((f"{name} batch {batch} bf16", lambda m=model, x=x: m(x), torch_cnn,
                      model_suite.MODELS[name][2] * batch))
    with tempfile.TemporaryDirectory() as tmp:
        encoders = [("MiniLM", bert.CONFIG, 32)]
        if not quick:
            encoders.append(("BERT-base", bert.BERT_BASE, 8))
        for name, config, batch in encoders:
            seq = 32 if quick else 128
            batch = 2 if quick else batch
            model, hf, _, _ = bert.setup(os.path.join(tmp, name), config=config, onnx=False)
            hf = hf.to(torch.bfloat16)
            ids = rng.integers(1000, config["vocab_size"], (batch, seq))
            mask = np.ones((batch, seq), np.int64)
            tkw = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}

            def mk_enc(model=model, ids=ids, mask=mask):
                return model(ids, mask).last_hidden_state

            def torch_enc(hf=hf, tkw=tkw):
                with torch.inference_mode():
                    return hf(**tkw).last_hidden_state.float().numpy()

            cases.append((f"{name} batch {batch} seq {seq} bf16", mk_enc, torch_enc,
                          bert.flops(batch, seq, config)))
    for case, fn, torch_fn, flops in cases:
        def medium(fn=fn):
            with modulekit.float32_matmul_precision("medium"):
                return fn()

        funcs = {"modulekit": medium, "modulekit float32": fn, "torch bf16": torch_fn}
        ref = fn()
        cos = {name: _cosines(ref, f()) for name, f in funcs.items()}
        res = interleaved(funcs, rounds=3 if quick else 7, min_time=0.01 if quick else 0.3,
                          pause=0.0 if quick else 0.1)
        case_rows = []
        report(case_rows, case, flops, res)
        for row in case_rows:
            row["cosine_vs_float32"] = cos[row["impl"]]
        rows.extend(case_rows)
    return rows


def report(results, case, flops, res):
    """Record one row per implementation of ``case`` and print them."""
    base = res["modulekit"]["seconds"]
    cells = []
    for name, st in res.items():
        row = {"suite": "bf16", "case": case, "impl": name, **st,
               "gflops": flops / st["seconds"] / 1e9}
        results.append(row)
        cells.append(f"{name} {fmt_time(st['seconds'])} {row['gflops']:.0f} GF/s "
                     f"(x{st['seconds'] / base:.2f})")
    print(f"{case}: " + " | ".join(cells))


def main(argv=None):
    from modulekit.bench.__main__ import main as bench_main

    return bench_main(["bf16", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())

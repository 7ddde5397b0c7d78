"""modulekit's performance targets, checked against a bench run's rows.

Each target names a (suite, case) row pair and the speedup modulekit must reach over a peer
(peer time / modulekit time): "<= 0.5x the peer's time" is a speedup of at least 2.

A target may also name a floor: a row of the same case that does only the unavoidable part of
the work (for a cast: moving its bytes, without converting them). The peer's time over the
floor's is then the largest speedup any implementation can reach on the machine measured,
reported as ``ceiling`` beside the target.
"""

from __future__ import annotations

from modulekit.bench.casts import FLOOR_NEW

# (the target, suite, case, peer impl, minimum speedup[, floor impl])
BARS = [
    ("Identity call overhead <= 0.5x torch's", "overhead", "Identity call", "torch", 2.0),
    ("float32 -> float16 cast of 64 MiB >= 20x ndarray.astype",
     "casts", "float32 -> float16 64 MiB, new array", "numpy astype", 20.0, FLOOR_NEW),
    ("float32 -> bfloat16 cast of 64 MiB >= 10x ml_dtypes astype",
     "casts", "float32 -> bfloat16 64 MiB, new array", "ml_dtypes astype", 10.0, FLOOR_NEW),
]
#: Casts to a new array within 1.5x of the time to allocate and write the output (issue #19)
for _src, _dst in (("float32", "float16"), ("float32", "bfloat16"), ("float16", "float32"),
                   ("bfloat16", "float32")):
    BARS.append((f"{_src} -> {_dst} cast of 64 MiB to a new array <= 1.5x allocate and write",
                 "casts", f"{_src} -> {_dst} 64 MiB, new array", FLOOR_NEW, 1 / 1.5))
del _src, _dst
BARS += [
    ("matmul float32 1024^3 >= 0.95x numpy", "gemm", "matmul 1024^3", "numpy", 0.95),
    ("packed Linear 1024x1024 batch 1024 >= 1.0x numpy", "gemm",
     "linear 1024x1024 batch 1024", "numpy", 1.0),
    ("Linear 512x512 batch 1 <= 0.5x numpy's time", "gemm", "linear 512x512 batch 1",
     "numpy", 2.0),
    ("MLP 784-256-256-10 batch 1 <= 0.5x onnxruntime's time", "gemm", "mlp batch 1",
     "onnxruntime", 2.0),
    ("2 threads >= 1.85x one thread on matmul 1024^3", "gemm",
     "matmul 1024^3 thread scaling", "modulekit 1 thread", 1.85),
    ("conv3x3 64->64 56x56 batch 1 >= 1.0x torch", "conv", "conv3x3 64->64 56x56", "torch",
     1.0),
    ("Conv1d 512->512 k3 s2 L3199 (wav2vec2) >= 1.0x torch", "conv",
     "Conv1d 512->512 k3 s2 L3199 (wav2vec2)", "torch", 1.0),
    ("ConvTranspose2d 256->128 k4 s2 p1 16x16 batch 8 (DCGAN) >= 1.0x torch", "conv",
     "ConvTranspose2d 256->128 k4 s2 p1 16x16 batch 8 (DCGAN)", "torch", 1.0),
    ("ResNet-18 batch 1 <= 0.9x onnxruntime's latency", "models", "ResNet-18 batch 1",
     "onnxruntime", 1 / 0.9),
    ("MobileNetV2 batch 1 <= 0.9x onnxruntime's latency", "models", "MobileNetV2 batch 1",
     "onnxruntime", 1 / 0.9),
    ("ResNet-18 batch 32 >= 1.0x onnxruntime's throughput", "models", "ResNet-18 batch 32",
     "onnxruntime", 1.0),
    ("BERT (MiniLM-L6) batch 32 seq 128 <= 0.8x onnxruntime's time", "bert",
     "MiniLM-L6 batch 32 seq 128", "onnxruntime", 1.25),
    ("BERT (MiniLM-L6) batch 1 seq 32 <= 0.8x onnxruntime's time", "bert",
     "MiniLM-L6 batch 1 seq 32", "onnxruntime", 1.25),
    ("safetensors load to first use >= 5x safetensors.numpy.load_file",
     "checkpoint_io", "load safetensors 200 MB, to first use", "safetensors.numpy.load_file",
     5.0),
    ("GroupNorm 32 groups 256ch 56x56 batch 8 >= 1.0x torch", "norm",
     "GroupNorm 32 groups 256ch 56x56 batch 8", "torch", 1.0),
    (".pt load no slower than torch.load(weights_only=True)",
     "checkpoint_io", "load pt-zip 200 MB, to first use", "torch.load(weights_only=True)", 1.0),
]

#: Resampling (``resample`` suite): bilinear x2 upsampling no slower than torch.
BARS += [
    ("bilinear x2 upsampling 1x64x128x128 >= 1.0x torch", "resample",
     "bilinear x2 1x64x128x128", "torch", 1.0),
    ("bilinear x2 upsampling 8x64x128x128 >= 1.0x torch", "resample",
     "bilinear x2 8x64x128x128", "torch", 1.0),
]
#: The bfloat16-and-int8 issue's bars (the bf16 and int8 suites) hold "on this machine kind"
#: (AMX); "on a CPU without AMX, >= 1.0x the same peers": bar -> its need on a machine whose
#: flags lack amx_tile (filled below).
WITHOUT_AMX = {}
_NO_AMX = " (1.0x without AMX)"
#: bfloat16 compute (``bf16`` suite): Linear under "medium" against torch's bfloat16 Linear
#: with the same float32 input and output.
for _k, _n, _m in ((4096, 4096, 64), (1024, 1024, 1024), (384, 1536, 256)):
    BARS.append((f"bfloat16 Linear {_k}->{_n} batch {_m} >= 1.2x torch bf16{_NO_AMX}", "bf16",
                 f"linear {_k}->{_n} batch {_m} bf16", "torch bf16 weights", 1.2))
BARS.append((f"bfloat16 ResNet-18 batch 32 >= 1.2x torch bf16{_NO_AMX}", "bf16",
             "ResNet-18 batch 32 bf16", "torch bf16", 1.2))

#: Applications (``application`` suite): beside another thread pool within 1.15x of modulekit's
#: latency alone; the first call after idle and the serving percentiles no slower than
#: onnxruntime's.
for _model in ("ResNet-18 batch 1", "MobileNetV2 batch 1", "MiniLM-L6 batch 1 seq 128"):
    for _other in ("a NumPy matmul", "an onnxruntime call"):
        BARS.append((f"{_model} after {_other} within 1.15x of its latency alone",
                     "application", f"{_model} after {_other}", "modulekit alone", 1 / 1.15))
    for _gap in ("50 ms", "200 ms"):
        BARS.append((f"{_model} first call after {_gap} idle <= onnxruntime's", "application",
                     f"{_model} first call after {_gap} idle", "onnxruntime", 1.0))
    for _cond in ("idle", "other core busy"):
        BARS.append((f"{_model} serving p99, {_cond} <= onnxruntime's", "application",
                     f"{_model} serving p99, {_cond}", "onnxruntime", 1.0))
del _model, _other, _gap, _cond
# int8 dynamic quantization (the bfloat16-and-int8 issue's bars)
BARS.append((f"MiniLM int8 batch 32 seq 128 >= 1.3x onnxruntime's quantize_dynamic{_NO_AMX}",
             "int8", "MiniLM int8 batch 32 seq 128", "onnxruntime", 1.3))
BARS.append((f"MiniLM int8 batch 32 seq 128 >= 1.5x torch's quantize_dynamic{_NO_AMX}", "int8",
             "MiniLM int8 batch 32 seq 128", "torch", 1.5))
# int8 static quantization
BARS.append((f"ResNet-18 int8 static batch 1 >= 1.2x onnxruntime's static QDQ model{_NO_AMX}",
             "int8", "ResNet-18 int8 static batch 1", "onnxruntime", 1.2))
WITHOUT_AMX.update((bar[0], 1.0) for bar in BARS if bar[1] in ("bf16", "int8"))

# ---- recurrent layers: LSTM and GRU forwards no slower than torch's
for _layer in ("LSTM", "GRU"):
    for _hidden in (256, 1024):
        for _batch in (1, 32):
            _case = f"{_layer} hidden {_hidden} batch {_batch} seq 100"
            BARS.append((f"{_case} >= 1.0x torch", "rnn", _case, "torch", 1.0))
del _layer, _hidden, _batch, _case


def check_bars(rows, machine=None):
    """One dict per target whose rows are present: measured speedup and whether it is met.

    ``machine`` (a bench run's ``machine`` record) lowers the needs of :data:`WITHOUT_AMX`
    where its CPU flags lack AMX; without it every need is the AMX machine's."""
    index = {(r.get("suite"), r.get("case"), r.get("impl")): r for r in rows}
    amx = machine is None or "amx_tile" in machine.get("cpu_flags", ())
    out = []
    for text, suite, case, peer, need, *floor in BARS:
        row = index.get((suite, case, peer))
        if row is None or not row.get("speedup"):
            continue
        if not amx:
            need = WITHOUT_AMX.get(text, need)
        bar = {"bar": text, "suite": suite, "case": case, "peer": peer,
               "needed": need, "speedup": row["speedup"], "met": row["speedup"] >= need}
        low = index.get((suite, case, floor[0])) if floor else None
        if low is not None and low.get("seconds"):
            bar["ceiling"] = row["seconds"] / low["seconds"]
        out.append(bar)
    return out


def ceiling_text(bar):
    """The target's ceiling as text to append ("; the memory allows at most Nx"), or ""."""
    return (f"; the memory allows at most {bar['ceiling']:.2f}x"
            if bar.get("ceiling") is not None else "")


def format_bars(bars):
    return "\n".join(
        f"  [{'met' if b['met'] else 'MISSED'}] {b['bar']}: "
        f"{b['speedup']:.2f}x (needs >= {b['needed']:.2f}x{ceiling_text(b)})"
        for b in bars
    )

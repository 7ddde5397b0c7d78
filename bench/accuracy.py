"""bfloat16 and int8 against float32, for each model of ``modulekit.models``: the table in
docs/api.md ("Accuracy of bfloat16 and int8 against float32").

    python bench/accuracy.py [--images N] [--sentences N]

For ResNet-18 and MobileNetV2 (224x224) and a MiniLM-L6-sized BERT (sequence 64), each with
random weights (and norm statistics) and random inputs, a fixed seed: the float32 output
against the output under ``float32_matmul_precision("medium")`` (bfloat16 compute where
modulekit has it), after ``quantization.quantize_dynamic`` (int8 Linear layers) and, for the
CNNs, after ``quantization.quantize_static`` (calibrated on 32 other random images, then
compiled: int8 activations between the convolutions). Printed
per model and mode: the largest absolute difference, the largest difference relative to the
output's largest magnitude, the smallest cosine similarity between an input's float32 and
low-precision output vectors (per image; per token for BERT) and, for the CNNs, how often the
top-1 class agrees. No real checkpoint or dataset can be fetched here, so these measure the
arithmetic on random models, not accuracy on a task.
"""

from __future__ import annotations

import argparse

import numpy as np

import modulekit as mk
from modulekit import models
from modulekit.quantization import quantize_dynamic, quantize_static

MINILM = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
              intermediate_size=1536, max_position_embeddings=512, type_vocab_size=2,
              layer_norm_eps=1e-12)


def _random_state(model, rng):
    state = {}
    for k, v in model.state_dict().items():
        arr = np.asarray(v)
        if k.endswith("running_var"):
            state[k] = rng.uniform(0.5, 1.5, arr.shape).astype(arr.dtype)
        elif arr.dtype.kind == "f":
            state[k] = (rng.standard_normal(arr.shape) * 0.05).astype(arr.dtype)
        else:
            state[k] = arr
    return state


def _compare(name, mode, ref, out, rows, top1=False):
    ref = ref.reshape(rows, -1).astype(np.float64)
    out = out.reshape(rows, -1).astype(np.float64)
    diff = np.abs(out - ref)
    cos = (ref * out).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(out, axis=1))
    agree = f"{100 * np.mean(ref.argmax(1) == out.argmax(1)):.1f}%" if top1 else "-"
    print(f"| {name} | {mode} | {diff.max():.2e} | {diff.max() / np.abs(ref).max():.2e} | "
          f"{cos.min():.6f} | {agree} |", flush=True)


def _run(model, inputs):
    return np.concatenate([np.asarray(model(*x)) for x in inputs])


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--sentences", type=int, default=16)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    print("| model | mode | max abs diff | max diff / max abs | min cosine | top-1 agreement |")
    print("|---|---|---:|---:|---:|---:|")
    for name, make in (("ResNet-18", models.resnet18), ("MobileNetV2", models.mobilenet_v2)):
        model = make().eval()
        model.load_state_dict(_random_state(model, rng))
        images = [(rng.standard_normal((8, 3, 224, 224)).astype(np.float32),)
                  for _ in range(a.images // 8)]
        ref = _run(model, images)
        with mk.float32_matmul_precision("medium"):
            _compare(name, "bfloat16 (medium)", ref, _run(model, images), len(ref), top1=True)
        _compare(name, "int8 dynamic", ref, _run(quantize_dynamic(model), images), len(ref),
                 top1=True)
        calibration = [rng.standard_normal((8, 3, 224, 224)).astype(np.float32)
                       for _ in range(4)]  # 32 other images
        static = quantize_static(model, calibration)
        static.compile()  # the activations in int8 between convolutions
        _compare(name, "int8 static", ref, _run(static, images), len(ref), top1=True)
    bert = models.BertModel(MINILM).eval()
    bert.load_state_dict(_random_state(bert, rng))
    sentences = [(rng.integers(1000, MINILM["vocab_size"], (1, 64)),)
                 for _ in range(a.sentences)]

    def hidden(m):
        return np.concatenate([m(*s).last_hidden_state for s in sentences])

    ref = hidden(bert)
    tokens = ref.shape[0] * ref.shape[1]
    with mk.float32_matmul_precision("medium"):
        _compare("MiniLM-L6 (seq 64)", "bfloat16 (medium)", ref, hidden(bert), tokens)
    _compare("MiniLM-L6 (seq 64)", "int8 dynamic", ref, hidden(quantize_dynamic(bert)), tokens)


if __name__ == "__main__":
    main()

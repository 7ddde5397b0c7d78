"""Smoke test of an installed modulekit (a wheel in a fresh environment): no test extras.

Imports modulekit (from the installed package, never a source tree), checks ``py.typed`` is
shipped, and runs a ResNet-18 and a small BERT with random weights: outputs of the right shape,
finite, equal (to float32 rounding) to the same model in float64, and, on a CPU with a SIMD
level, to the generic C kernels. Run as ``python .ci/smoke.py`` (cibuildwheel's test command
too). Exits non-zero on any failure.
"""

import copy
import importlib.resources
import os
import sys

import numpy as np

import modulekit as mk
from modulekit._ext import _isa
from modulekit.models import BertConfig, BertModel, resnet18


def check_close(name, got, ref, tol):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"{name}: shape {got.shape}, reference {ref.shape}"
    assert np.isfinite(got).all(), f"{name}: non-finite outputs"
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err < tol, f"{name}: max error {err:.2e} (relative to the output scale) > {tol}"
    return err


def run_isas(model, *args):
    """The model's output with the best kernels, and with the generic C kernels."""
    best = _isa.get_isa()
    out_best = model(*args)
    if best == "generic":
        return out_best, None
    _isa.set_isa("generic")
    try:
        return out_best, model(*args)
    finally:
        _isa.set_isa(best)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    source_tree = os.path.join(os.path.dirname(here), "src")
    pkg = os.path.dirname(os.path.abspath(mk.__file__))
    assert not pkg.startswith(source_tree + os.sep), f"modulekit imported from {pkg}"
    assert importlib.resources.files("modulekit").joinpath("py.typed").is_file(), "no py.typed"
    print(
        f"modulekit {mk.__version__} from {pkg}; kernels {_isa.get_isa()} "
        f"(available {', '.join(_isa.available_isas())}); OpenMP "
        f"{mk.threads.openmp_enabled()}, {mk.get_num_threads()} threads"
    )
    rng = np.random.default_rng(0)

    # ResNet-18, random weights, eval mode (BatchNorm folded into the packed convolutions)
    mk.nn.manual_seed(0)
    net = resnet18(num_classes=10).eval()
    net64 = copy.deepcopy(net).to(mk.float64)
    x = rng.standard_normal((2, 3, 64, 64)).astype(np.float32)
    out, generic = run_isas(net, x)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32, type(out)
    assert out.shape == (2, 10), out.shape
    err = check_close("resnet18 float32 vs float64", out, net64(x.astype(np.float64)), 1e-3)
    line = f"resnet18: output {out.shape}, vs float64 {err:.1e}"
    if generic is not None:
        line += f", vs generic kernels {check_close('resnet18 generic', generic, out, 1e-4):.1e}"
    print(line)

    # BERT (2 layers, hidden 64), random weights, with a padding mask
    mk.nn.manual_seed(0)
    config = BertConfig(
        vocab_size=120, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=32,
    )
    bert = BertModel(config).eval()
    bert64 = copy.deepcopy(bert).to(mk.float64)
    ids = rng.integers(1, 120, size=(2, 16))
    mask = np.ones((2, 16), dtype=np.int64)
    mask[1, 11:] = 0
    res, generic = run_isas(bert, ids, mask)
    assert res.last_hidden_state.shape == (2, 16, 64), res.last_hidden_state.shape
    assert res.pooler_output.shape == (2, 64), res.pooler_output.shape
    ref = bert64(ids, mask)
    err = check_close("bert float32 vs float64", res.last_hidden_state, ref.last_hidden_state, 1e-4)
    check_close("bert pooler float32 vs float64", res.pooler_output, ref.pooler_output, 1e-4)
    line = f"bert: output {res.last_hidden_state.shape}, vs float64 {err:.1e}"
    if generic is not None:
        e = check_close("bert generic", generic.last_hidden_state, res.last_hidden_state, 1e-5)
        line += f", vs generic kernels {e:.1e}"
    print(line)
    print("smoke test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The float32 GELU epilogue (erf form) against the exact value on a dense float32 grid."""

import math

import numpy as np
import pytest

from modulekit._ext import _gemm

_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def test_gelu_f32_dense_grid(isa):
    """Every 8191th float32 bit pattern with |x| < 20 (about 125,000 values across every
    binade, both tails included): within 5e-7 relative of the exact GELU, or the smallest
    normal absolute (the far negative tail underflows)."""
    bits = np.arange(0, 2**32, 8191, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x = x[np.isfinite(x) & (np.abs(x) < 20)]
    x = np.concatenate([x, np.float32([0.0, -0.0, 14.0, -14.0, 1e30, -1e30])])
    xs = np.resize(x, (x.size // 8 + 1) * 8).reshape(-1, 8)
    eye = _gemm.pack_linear(np.eye(8), None, "float32")
    y = eye.forward(xs, "gelu", 0.0, 0.0).astype(np.float64)
    x64 = xs.astype(np.float64)
    with np.errstate(invalid="ignore"):
        ref = 0.5 * x64 * _erfc(-x64 * math.sqrt(0.5))
    rel = 5e-7  # every ISA path evaluates the same float32 math (kernels/common), bit for bit
    ok = np.abs(y - ref) <= rel * np.abs(ref) + np.finfo(np.float32).tiny
    assert ok.all(), (x64[~ok][:5], y[~ok][:5], ref[~ok][:5])


@pytest.mark.parametrize("m", [1, 7, 33])
def test_gelu_f32_against_torch(isa, m):
    """GELU fused into a GEMM against torch's float32 GELU of torch's float32 linear."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    w = rng.standard_normal((37, 53)).astype(np.float32)
    b = rng.standard_normal(37).astype(np.float32)
    x = rng.standard_normal((m, 53)).astype(np.float32)
    y = _gemm.pack_linear(w, b, "float32").forward(x, "gelu", 0.0, 0.0)
    ref = torch.nn.functional.gelu(
        torch.nn.functional.linear(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b))
    ).numpy()
    scale = np.abs(x) @ np.abs(w).T + np.abs(b)
    np.testing.assert_array_less(np.abs(y - ref), 2.4e-5 * scale + 1e-6)

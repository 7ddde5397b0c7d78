"""MobileNetV2's kernels: the direct depthwise 3x3 (f32-dwconv2d-chw-3x3-*) against torch.

Odd sizes cover every remainder of the 16-column vectors and of the row bands (4 rows at
stride 1, 2 at stride 2), paddings 0..2 (asymmetric too), residual on/off, batch > 1 and
strided input views; every ISA path this CPU has (the AVX-512 kernel, the phase-image
fallback elsewhere) and float64 (its own direct loop).
"""

import numpy as np
import pytest

from modulekit._ext import _conv

torch = pytest.importorskip("torch")
F = torch.nn.functional

ACTS = {None: lambda t: t, "relu": F.relu, "relu6": F.relu6}


def reference(x, w, b, stride, pads, act=None, residual=None, groups=None):
    xt = torch.from_numpy(np.ascontiguousarray(x)).double()
    t, l_, bo, r = pads
    xt = F.pad(xt, (l_, r, t, bo))
    bt = None if b is None else torch.from_numpy(np.asarray(b, np.float64))
    wt = torch.from_numpy(np.asarray(w, np.float64))
    y = F.conv2d(xt, wt, bt, stride, 0, 1, groups or w.shape[0])
    if residual is not None:
        y = y + torch.from_numpy(np.asarray(residual, np.float64))
    return ACTS[act](y).numpy()


# (batch, channels, H, W, stride, (top, left, bottom, right))
DW_CASES = [
    (1, 3, 1, 1, 1, (1, 1, 1, 1)),
    (2, 5, 7, 7, 1, (1, 1, 1, 1)),
    (1, 4, 9, 17, 1, (1, 1, 1, 1)),
    (1, 3, 13, 33, 1, (0, 0, 0, 0)),
    (1, 2, 6, 31, 1, (2, 0, 1, 2)),
    (1, 3, 14, 14, 2, (1, 1, 1, 1)),
    (2, 3, 15, 47, 2, (1, 1, 1, 1)),
    (1, 2, 11, 34, 2, (0, 0, 0, 0)),
    (1, 2, 10, 33, 2, (0, 1, 2, 0)),
    (1, 3, 2, 2, 2, (1, 1, 1, 1)),
    (1, 2, 5, 65, 1, (1, 1, 1, 1)),
]


@pytest.mark.parametrize("case", DW_CASES)
@pytest.mark.parametrize("act", [None, "relu6"])
def test_depthwise3x3(isa, rng, case, act):
    n, c, h, w, s, pads = case
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    packed = _conv.pack_conv2d(wt, b, stride=s, padding=pads, groups=c)
    assert packed.depthwise
    y = packed.forward(x, act)
    np.testing.assert_allclose(y, reference(x, wt, b, s, pads, act), rtol=1e-5, atol=1e-5)
    r = rng.standard_normal(y.shape).astype(np.float32)
    np.testing.assert_allclose(
        packed.forward(x, act, residual=r),
        reference(x, wt, b, s, pads, act, r),
        rtol=1e-5,
        atol=1e-5,
    )


def test_depthwise3x3_views_and_float64(isa, rng):
    big = rng.standard_normal((2, 9, 20, 41)).astype(np.float32)
    wt = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    for s in (1, 2):
        packed = _conv.pack_conv2d(wt, None, stride=s, padding=1, groups=4)
        for v in (big[:, 2:6, 1:18, 3:40], big[:, 1:9:2, ::2, :], big[:, :4, :, ::2]):
            np.testing.assert_allclose(
                packed.forward(v), reference(v, wt, None, s, (1, 1, 1, 1)), rtol=1e-5,
                atol=1e-5,
            )
        p64 = _conv.pack_conv2d(wt.astype(np.float64), None, stride=s, padding=1, groups=4)
        v = big[:, :4].astype(np.float64)
        y = p64.forward(v)
        assert y.dtype == np.float64
        np.testing.assert_allclose(y, reference(v, wt, None, s, (1, 1, 1, 1)), rtol=1e-12)

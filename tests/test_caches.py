"""The caches the kernels' blocking is sized against (kernels/common/caches.h): detected as the
OS reports them, and the L2 budgets change the blocking only, never a result."""

import os

import numpy as np
import pytest

from modulekit._ext import _conv, _gemm, _isa

SYSFS = "/sys/devices/system/cpu/cpu0/cache"


def _read(entry, name):
    with open(os.path.join(SYSFS, entry, name)) as f:
        return f.read().strip()


def _sysfs_caches():
    """{level name: bytes} of cpu0's data and unified caches, or None without sysfs."""
    if not os.path.isdir(SYSFS):
        return None
    out = {}
    for entry in sorted(os.listdir(SYSFS)):
        if not entry.startswith("index"):
            continue
        try:
            level = int(_read(entry, "level"))
            kind, size = _read(entry, "type"), _read(entry, "size")
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
        value = int(size.rstrip("KMG")) * scale
        key = "l1d" if level == 1 else "l2" if level == 2 else "l3"
        out[key] = max(out.get(key, 0), value)
    return out


def test_detected_caches_are_the_os_report():
    caches = _isa.cpu_caches()
    assert set(caches) == {"l1d", "l2", "l3"}
    assert all(v > 0 for v in caches.values())
    reported = _sysfs_caches()
    if not reported:
        pytest.skip("no sysfs cache report on this system")
    for key, value in reported.items():
        assert caches[key] == value, key
    # every extension's copy of kernels/common detects the same L2
    assert _gemm._set_l2_bytes(0) == _conv._set_l2_bytes(0) == caches["l2"]


@pytest.fixture
def l2_bytes():
    """Set the L2 size the GEMM's and the convolutions' blocking use; restored after."""
    before = (_gemm._set_l2_bytes(0), _conv._set_l2_bytes(0))

    def set_l2(n):
        _gemm._set_l2_bytes(n)
        _conv._set_l2_bytes(n)

    yield set_l2
    _gemm._set_l2_bytes(before[0])
    _conv._set_l2_bytes(before[1])


SIZES = (128 << 10, 1 << 20, 8 << 20)  # clamped at a quarter and four times the reference


def test_gemm_blocking_follows_l2_not_the_result(isa, rng, l2_bytes):
    """More rows than any MC block (MC 24-384 rows over these sizes), unit-stride and strided
    inputs (the row kernels and packed A): the same bits at every L2 size."""
    a = rng.standard_normal((1000, 300)).astype(np.float32)
    b = rng.standard_normal((300, 70)).astype(np.float32)
    w = rng.standard_normal((70, 300)).astype(np.float32)
    bias = rng.standard_normal(70).astype(np.float32)
    lin = _gemm.pack_linear(w, bias)
    outs = []
    for size in SIZES:
        l2_bytes(size)
        outs.append((_gemm.matmul(a, b), lin.forward(a, "relu"), lin.forward(a[:, ::-1], "none")))
    for got in outs[1:]:
        for x, y in zip(outs[0], got):
            np.testing.assert_array_equal(x, y)
    np.testing.assert_allclose(outs[0][0], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("algorithm", ["winograd-2x2", "winograd-4x4"])
def test_winograd_blocks_follow_l2_not_the_result(isa, rng, l2_bytes, algorithm):
    """Winograd tile blocks sized from L2 (a few to many blocks over these sizes, batch 2):
    the same bits at every L2 size."""
    x = rng.standard_normal((2, 48, 30, 30)).astype(np.float32)
    w = rng.standard_normal((40, 48, 3, 3)).astype(np.float32)
    packed = _conv.pack_conv2d(w, rng.standard_normal(40).astype(np.float32), padding=1)
    packed.algorithm = algorithm
    outs = []
    for size in SIZES:
        l2_bytes(size)
        outs.append(packed.forward(x, "relu"))
    for got in outs[1:]:
        np.testing.assert_array_equal(outs[0], got)


def test_fused_max_pool_bands_follow_l2_not_the_result(isa, rng, l2_bytes):
    """The stem's fused max pool in row bands of a quarter of L2: the same bits as the
    convolution and then the pool, at every L2 size."""
    x = rng.standard_normal((1, 3, 97, 101)).astype(np.float32)
    w = rng.standard_normal((64, 3, 7, 7)).astype(np.float32)
    packed = _conv.pack_conv2d(w, rng.standard_normal(64).astype(np.float32), stride=2,
                               padding=3)
    outs = []
    for size in SIZES:
        l2_bytes(size)
        outs.append(packed.forward_maxpool(x, "relu", 3, 2, 1))
    for got in outs[1:]:
        np.testing.assert_array_equal(outs[0], got)


def test_inverted_residual_bands_follow_l2_not_the_result(isa, rng, l2_bytes):
    """The fused block's row bands from INVRES_BAND_BYTES scaled to L2 (1, 4 and 28 of the
    56 output rows of a stride-2 block over a 112x112 map, at these sizes and two threads):
    the same bits at every L2 size."""
    def conv(co, ci, k, s=1, p=0, groups=1):
        w = rng.standard_normal((co, ci // groups, k, k)).astype(np.float32) / k
        return _conv.pack_conv2d(w, rng.standard_normal(co).astype(np.float32), stride=s,
                                 padding=p, groups=groups)

    x = rng.standard_normal((1, 16, 112, 112)).astype(np.float32)
    convs = conv(96, 16, 1), conv(96, 96, 3, 2, 1, groups=96), conv(24, 96, 1)
    outs = []
    for size in SIZES:
        l2_bytes(size)  # a new chain plans its bands for it
        outs.append(_conv.DepthwiseChain(*convs, ("relu6", "relu6", None))(x))
    for got in outs[1:]:
        np.testing.assert_array_equal(outs[0], got)

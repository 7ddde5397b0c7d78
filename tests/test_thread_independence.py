"""Every driver with barriers or phases inside its parallel region gives one thread's bits on
a team, called again and again (kernels/*: the recurrence, the layer chain, Winograd's shared
blocks, the fused inverted residual block, int8 linear, in-place casts, pooling, the stem,
the pipelined matmul, the bfloat16 convolutions).

A race between a team's threads shows as a result that differs from one call to the next:
the fused recurrence once copied the final state into the buffer another thread's GEMM was
still reading (h_n wrong in about a third of two-thread calls). Each case runs on one thread
for the reference, then repeatedly on teams of 2 and 3 threads (3 on a 2-CPU machine pushes a
thread off its CPU in the middle of a phase), with the contention back-off reset before each
call so that every call runs its regions on the team (counted).
"""

import numpy as np
import pytest

import modulekit
import modulekit.nn as mnn
from modulekit._ext import _cast, _conv, _gemm, _isa, _openmp_helpers, _qgemm
from modulekit.nn.utils import rnn as mrnn

pytestmark = pytest.mark.skipif(not _openmp_helpers.openmp_enabled(),
                                reason="built without OpenMP")

CALLS = 6  # per team size
TEAMS = (2, 3)


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def conv(rng, cout, cin, k, stride=1, padding=0, groups=1, algorithm="auto"):
    w = f32(rng, cout, cin // groups, k, k) / np.float32(np.sqrt(cin // groups * k * k))
    p = _conv.pack_conv2d(w, f32(rng, cout), stride=stride, padding=padding, groups=groups)
    p.algorithm = algorithm
    return p


def outputs(result):
    if isinstance(result, mrnn.PackedSequence):
        return [np.asarray(result.data)]
    if isinstance(result, (tuple, list)):
        return [a for r in result for a in outputs(r)]
    return [np.asarray(result)]


def assert_team_bits(fn):
    """fn() on teams of TEAMS threads, CALLS times each, equals its one-thread result bit for
    bit, and every call ran parallel regions."""
    try:
        _openmp_helpers.set_num_threads(1)
        want = outputs(fn())
        for team in TEAMS:
            _openmp_helpers.set_num_threads(team)
            for call in range(CALLS):
                _openmp_helpers._reset_backoff()
                before = _openmp_helpers._team_regions()
                got = outputs(fn())
                assert _openmp_helpers._team_regions() > before, "no parallel region ran"
                for g, w in zip(got, want):
                    assert g.dtype == w.dtype and g.shape == w.shape
                    assert np.array_equal(g.view(np.uint8), w.view(np.uint8)), (
                        f"{team} threads, call {call}: {np.count_nonzero(g != w)} elements "
                        f"differ from one thread's")
    finally:
        _openmp_helpers._reset_backoff()
        _openmp_helpers.reset_num_threads()


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
@pytest.mark.parametrize("layout", ["packed", "T1", "T5"])
def test_recurrence(isa, name, layout):
    rng = np.random.default_rng(1)
    mod = getattr(mnn, name)(16, 128, bidirectional=True).eval()
    mod.load_state_dict({k: rng.uniform(-0.2, 0.2, v.shape).astype(np.float32)
                         for k, v in mod.state_dict().items()})
    if layout == "packed":  # rows that end (forward) and join (reverse) between steps
        x = mrnn.pack_padded_sequence(f32(rng, 9, 9, 16), [9, 9, 7, 6, 6, 3, 2, 1, 1])
    else:
        x = f32(rng, int(layout[1:]), 32, 16)
    assert_team_bits(lambda: mod(x))


@pytest.mark.parametrize("widths", [(512, 1024, 512, 97), (768, 3072, 768)], ids=str)
@pytest.mark.parametrize("rows", [1, 8])
def test_linear_chain(isa, widths, rows):
    rng = np.random.default_rng(2)
    layers = [_gemm.pack_linear(f32(rng, widths[i + 1], widths[i]) / np.float32(widths[i]),
                                f32(rng, widths[i + 1])) for i in range(len(widths) - 1)]
    chain = _gemm.linear_chain(layers, ["gelu"] * len(layers))
    x = f32(rng, rows, widths[0])
    assert_team_bits(lambda: chain(x))


@pytest.mark.parametrize("engine", [0, 1])
@pytest.mark.parametrize("shape", [(1, 40, 56, 30, 2), (1, 64, 64, 29, 4), (1, 128, 64, 28, 4),
                                   (2, 16, 24, 9, 4)], ids=str)
def test_winograd(isa, engine, shape):
    n, cin, cout, hw, m = shape
    rng = np.random.default_rng(3)
    c = conv(rng, cout, cin, 3, 1, 1, algorithm=f"winograd-{m}x{m}")
    x = f32(rng, n, cin, hw, hw)
    was = _conv._set_winograd_engine(engine)
    try:
        assert_team_bits(lambda: c.forward(x, "relu"))
    finally:
        _conv._set_winograd_engine(was)


@pytest.mark.parametrize("block", [(32, 192, 32, 14, 1, True), (20, 72, 20, 13, 1, True),
                                   (24, 144, 32, 28, 2, False)], ids=str)
def test_inverted_residual(isa, block):
    cin, hidden, cout, hw, stride, residual = block
    rng = np.random.default_rng(4)
    chain = _conv.DepthwiseChain(conv(rng, hidden, cin, 1),
                                 conv(rng, hidden, hidden, 3, stride, 1, hidden),
                                 conv(rng, cout, hidden, 1), ("relu6", "relu6", None), residual)
    x = f32(rng, 1, cin, hw, hw)
    assert_team_bits(lambda: chain(x))


def test_igemm_images_and_stem(isa):
    rng = np.random.default_rng(5)
    c = conv(rng, 40, 32, 3, 2, 1, algorithm="igemm")
    x = f32(rng, 3, 32, 17, 17)  # the phase image is rebuilt per image, after a barrier
    assert_team_bits(lambda: c.forward(x, "relu"))
    stem = conv(rng, 64, 3, 7, 2, 3)
    xs = f32(rng, 2, 3, 96, 96)
    assert_team_bits(lambda: stem.forward_maxpool(xs, "relu", 3, 2, 1))
    if _isa.get_isa() == "avx512":  # the max pool with a barrier (the others are serial)
        xp = f32(rng, 2, 64, 57, 55)
        assert_team_bits(lambda: _conv.max_pool2d(xp, 3, 2, 1))


@pytest.mark.parametrize("path", ["avx512bf16", "amx"])
def test_bf16_igemm_and_stem(path):
    """bfloat16 compute under "medium": the implicit GEMM over the pair image (rebuilt per
    step of images, after a barrier) and over packed tiles (few channels a group), and the
    stem's bands, with and without the max pool."""
    if path not in _isa.available_bf16():
        pytest.skip(f"no {path} bfloat16 path on this CPU")
    prev_isa, prev_bf16 = _isa.get_isa(), _isa.get_bf16()
    rng = np.random.default_rng(6)
    try:
        _isa.set_isa("avx512")
        _isa.set_bf16(path)
        with modulekit.float32_matmul_precision("medium"):
            c = conv(rng, 40, 32, 3, 1, 1, algorithm="igemm")  # not Winograd on any team
            x = f32(rng, 3, 32, 17, 17)
            assert c.algorithm_for(x.shape) == "igemm-bf16"
            assert_team_bits(lambda: c.forward(x, "relu", x[:, :1].repeat(40, 1)))
            # 4 channels a group: packed tiles, all of an image's packed first (its weights
            # outweigh the 6x6 input)
            grouped = conv(rng, 256, 16, 3, 1, 1, groups=4, algorithm="igemm")
            xg = f32(rng, 3, 16, 6, 6)
            assert grouped.algorithm_for(xg.shape) == "igemm-bf16"
            assert_team_bits(lambda: grouped.forward(xg, "relu"))
            stem = conv(rng, 64, 3, 7, 2, 3)
            xs = f32(rng, 2, 3, 96, 96)
            assert stem.algorithm_for(xs.shape) == "igemm-bf16-rows"
            assert stem.maxpool_algorithm_for(xs.shape, 3, 2, 1) == "igemm-bf16-maxpool"
            assert_team_bits(lambda: stem.forward(xs, "relu"))
            assert_team_bits(lambda: stem.forward_maxpool(xs, "relu", 3, 2, 1))
    finally:
        _isa.set_isa(prev_isa)
        _isa.set_bf16(prev_bf16)


def test_int8_linear_matmul_and_casts(isa):
    rng = np.random.default_rng(6)
    wq, scale = _qgemm.quantize_weight(f32(rng, 700, 300))
    q = _qgemm.pack_qlinear(wq, scale, f32(rng, 700))
    x = f32(rng, 77, 300)
    assert_team_bits(lambda: q.forward(x))
    a, b = f32(rng, 513, 257), f32(rng, 257, 1031)
    assert_team_bits(lambda: _gemm.matmul(a, b))
    src = f32(rng, 600_001)

    def narrow_in_place():  # rounds of reads and writes in one buffer, barriers between
        buf = src.copy()
        _cast.cast_into(buf, buf.view(np.float16)[: buf.size])
        return buf.view(np.float16)[: buf.size].copy()

    was = _cast.set_parallel_min_bytes(1 << 12)
    try:
        assert_team_bits(narrow_in_place)
    finally:
        _cast.set_parallel_min_bytes(was)

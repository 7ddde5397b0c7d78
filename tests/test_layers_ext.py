"""Issue 17's activations, norms, embeddings, distances, dropout variants, containers and
losses against torch (the oracle): odd shapes, float64, non-contiguous inputs, in-place
variants, every ISA path of the group normalisation kernel, and bad input (errors naming the
layer; nothing changed after an error)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as TF  # noqa: E402

import modulekit.nn as nn  # noqa: E402
from modulekit._ext import _norm  # noqa: E402
from modulekit.nn import functional as F  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


def close(got, want, rtol=RTOL, atol=ATOL):
    want = want.detach().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    got = np.asarray(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


def t(a):
    return torch.from_numpy(np.array(a, order="C"))  # (ascontiguousarray makes 0-d 1-d)


def load_from_torch(mk, tm):
    mk.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    return mk


@pytest.fixture
def x_odd(rng):
    """An odd-shaped input with large and small values, as a non-contiguous view."""
    base = rng.standard_normal((3, 7, 5, 4)).astype(np.float32) * 4
    base[0, 0, :3, 0] = [30.0, -30.0, 0.0]
    return base.transpose(0, 2, 1, 3)  # (3, 5, 7, 4), not contiguous


# ---- activations -------------------------------------------------------------------------
ACTIVATIONS = [
    ("LeakyReLU", {}, {}), ("LeakyReLU", {"negative_slope": 0.2}, {}),
    ("ELU", {"alpha": 0.7}, {}), ("SELU", {}, {}), ("CELU", {"alpha": 1.5}, {}),
    ("GELU", {}, {}), ("GELU", {"approximate": "tanh"}, {}), ("Mish", {}, {}),
    ("Hardsigmoid", {}, {}), ("Hardtanh", {"min_val": -2.0, "max_val": 0.5}, {}),
    ("Softplus", {"beta": 2.0, "threshold": 5.0}, {}), ("Softsign", {}, {}),
    ("LogSigmoid", {}, {}), ("Tanhshrink", {}, {}), ("Hardshrink", {"lambd": 0.7}, {}),
    ("Softshrink", {"lambd": 0.3}, {}), ("Threshold", {"threshold": 0.1, "value": 20.0}, {}),
    ("LogSoftmax", {"dim": 1}, {}), ("Softmin", {"dim": -1}, {}), ("Softmax2d", {}, {}),
    ("GLU", {"dim": -1}, {}), ("GLU", {"dim": 0}, {"shape": (4, 3)}),
    ("RReLU", {"lower": 0.1, "upper": 0.3}, {}), ("PReLU", {"num_parameters": 5}, {}),
]


@pytest.mark.parametrize("name,kwargs,opts", ACTIVATIONS,
                         ids=[f"{a[0]}-{i}" for i, a in enumerate(ACTIVATIONS)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_activation_matches_torch(name, kwargs, opts, dtype, x_odd):
    x = x_odd.astype(dtype)
    if "shape" in opts:
        x = x.reshape(-1)[: np.prod(opts["shape"])].reshape(opts["shape"])
    tm = getattr(torch.nn, name)(**kwargs).eval().to(torch.float64 if dtype == np.float64
                                                     else torch.float32)
    m = getattr(nn, name)(**kwargs).eval()
    if name == "PReLU":
        with torch.no_grad():
            tm.weight.copy_(torch.linspace(-1, 2, 5))
        load_from_torch(m, tm)
        if dtype == np.float64:
            m.to("float64")
    before = x.copy()
    close(m(x), tm(t(x)))
    np.testing.assert_array_equal(x, before)  # the input is left alone


@pytest.mark.parametrize("fn,args", [
    ("leaky_relu", (0.1,)), ("elu", (1.0,)), ("selu", ()), ("celu", (0.5,)),
    ("hardtanh", (-0.5, 0.5)), ("hardsigmoid", ()), ("mish", ()), ("threshold", (0.2, -1.0)),
    ("rrelu", (0.1, 0.2, False)),
])
def test_inplace_overwrites_the_input(fn, args, rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    want = getattr(TF, fn)(t(x.copy()), *args)
    y = getattr(F, fn)(x, *args, inplace=True)
    assert y is x
    close(x, want)
    lst = x.tolist()  # a list cannot be overwritten: a new array
    assert isinstance(getattr(F, fn)(lst, *args, inplace=True), np.ndarray)


def test_functional_softmax_family(rng):
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    x[0, 0, 0] = -np.inf
    for d in (0, 1, -1):
        close(F.log_softmax(x, d), TF.log_softmax(t(x), d))
        close(F.softmin(x, d), TF.softmin(t(x), d))
    close(F.log_softmax(x, 1, dtype="float64"), TF.log_softmax(t(x), 1, dtype=torch.float64))
    with pytest.warns(UserWarning, match="Implicit dimension"):
        F.log_softmax(x)
    with pytest.raises(IndexError, match="log_softmax: dim 3"):
        F.log_softmax(x, 3)


def test_activation_extremes():
    x = np.array([-1e4, -100.0, -20.0, -1e-3, 0.0, 1e-3, 20.0, 100.0, 1e4, np.nan], np.float32)
    for name in ("softplus", "logsigmoid", "mish", "elu", "selu", "celu", "softsign",
                 "tanhshrink", "hardshrink", "softshrink"):
        close(getattr(F, name)(x), getattr(TF, name)(t(x)))
    close(F.threshold(x, 0.0, 5.0), TF.threshold(t(x), 0.0, 5.0))


def test_activation_bad_input():
    with pytest.raises(ValueError, match=r"PReLU\(3\).*3 channels.*got.*4|PReLU\(3\)"):
        nn.PReLU(3)(np.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"PReLU\(4\): prelu: weight has 4 elements"):
        nn.PReLU(4)(np.zeros(4))  # a 1-D input has one channel, as in torch
    with pytest.raises(ValueError, match="glu: halving dimension"):
        nn.GLU()(np.zeros((2, 5)))
    with pytest.raises(TypeError, match="LeakyReLU.*complex"):
        nn.LeakyReLU()(np.zeros(3, np.complex64))
    with pytest.raises(ValueError, match="Softmax2d: expected a 3-D"):
        nn.Softmax2d()(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="Hardtanh"):
        nn.Hardtanh(1.0, -1.0)
    with pytest.raises(ValueError, match="PReLU: num_parameters"):
        nn.PReLU(0)


def test_rrelu_training_draws_slopes_in_range(rng):
    x = -np.abs(rng.standard_normal(10000)).astype(np.float32) - 0.1
    m = nn.RReLU(0.1, 0.3).train()
    slopes = m(x) / x
    assert slopes.min() >= 0.1 - 1e-6 and slopes.max() <= 0.3 + 1e-6
    assert abs(slopes.mean() - 0.2) < 0.01
    close(m.eval()(x), TF.rrelu(t(x), 0.1, 0.3, training=False))


def test_activation_reprs():
    assert repr(nn.LeakyReLU(0.2, inplace=True)) == repr(torch.nn.LeakyReLU(0.2, inplace=True))
    for tm, m in ((torch.nn.ELU(0.5), nn.ELU(0.5)), (torch.nn.Softplus(2, 10), nn.Softplus(2, 10)),
                  (torch.nn.Hardshrink(0.3), nn.Hardshrink(0.3)), (torch.nn.GLU(1), nn.GLU(1)),
                  (torch.nn.LogSoftmax(1), nn.LogSoftmax(1)), (torch.nn.PReLU(4), nn.PReLU(4)),
                  (torch.nn.Threshold(0.1, 2.0), nn.Threshold(0.1, 2.0))):
        assert repr(m) == repr(tm)


# ---- norms -------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,groups", [((2, 6, 7, 5), 3), ((3, 4, 1), 2), ((1, 8, 33), 8),
                                          ((2, 12), 4), ((2, 4, 3, 2, 5), 1),
                                          ((4, 64, 17, 9), 16)])
def test_group_norm_kernel_every_isa(isa, shape, groups, rng):
    x = (rng.standard_normal(shape) * 3 + 50).astype(np.float32)
    w = rng.standard_normal(shape[1]).astype(np.float32)
    b = rng.standard_normal(shape[1]).astype(np.float32)
    for dt in (np.float32, np.float64):
        xx = x.astype(dt)
        want = TF.group_norm(t(xx), groups, t(w.astype(dt)), t(b.astype(dt)), 1e-5)
        close(_norm.group_norm(xx, groups, w, b, 1e-5), want, atol=5e-5 if dt == np.float32
              else 1e-10)
        close(_norm.group_norm(xx, groups), TF.group_norm(t(xx), groups), atol=5e-5)
    assert _norm.kernel_name().endswith(isa if isa != "generic" else "scalar")


@pytest.mark.parametrize("shape", [(2, 8, 55, 53), (1, 4, 7, 3), (3, 32, 64)])
def test_group_norm_streaming_stores_give_the_same_bits(isa, shape, rng):
    """Outputs above streaming_min_bytes use the non-temporal-store variant (AVX-512): the
    same values, whatever the output's alignment and the spans' tails."""
    x = rng.standard_normal(shape).astype(np.float32)
    w, b = rng.standard_normal(shape[1]), rng.standard_normal(shape[1])
    previous = _norm.set_streaming_min_bytes(0)
    try:
        plain = _norm.group_norm(x, 4, w, b)
        _norm.set_streaming_min_bytes(1)
        assert _norm.streaming_min_bytes() == 1
        streamed = _norm.group_norm(x, 4, w, b)
    finally:
        _norm.set_streaming_min_bytes(previous)
    np.testing.assert_array_equal(streamed, plain)
    close(streamed, TF.group_norm(t(x), 4, t(w.astype(np.float32)), t(b.astype(np.float32))))


def test_group_norm_constant_group_and_empty():
    x = np.full((2, 4, 3), 7.0, np.float32)
    close(F.group_norm(x, 2), TF.group_norm(t(x), 2))
    e = np.zeros((0, 4, 3), np.float32)
    assert F.group_norm(e, 2).shape == (0, 4, 3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("affine,bias", [(True, True), (True, False), (False, True)])
def test_group_norm_layer(dtype, affine, bias, rng):
    tdt = torch.float64 if dtype == np.float64 else torch.float32
    tm = torch.nn.GroupNorm(4, 12, eps=1e-3, affine=affine, bias=bias).to(tdt)
    with torch.no_grad():
        for p in tm.parameters():
            p.copy_(torch.randn(p.shape, dtype=tdt))
    m = load_from_torch(nn.GroupNorm(4, 12, eps=1e-3, affine=affine, bias=bias,
                                     dtype=np.dtype(dtype).name), tm)
    x = rng.standard_normal((3, 5, 12, 6)).astype(dtype).transpose(0, 2, 1, 3)  # non-contig
    close(m(x), tm(t(x)), atol=1e-5 if dtype == np.float32 else 1e-10)
    assert repr(m) == repr(tm)


def test_group_norm_bad_input():
    m = nn.GroupNorm(4, 12)
    with pytest.raises(ValueError, match=r"GroupNorm\(4, 12\): expected an \(N, 12, \*\)"):
        m(np.zeros((2, 8, 3), np.float32))
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(5, 12)
    with pytest.raises(ValueError, match=r"GroupNorm\(1, 1\): expected more than 1 value"):
        nn.GroupNorm(1, 1)(np.ones((1, 1), np.float32))  # torch refuses it too
    with pytest.raises(ValueError, match="group_norm: num_groups=5"):
        F.group_norm(np.zeros((2, 12)), 5)
    with pytest.raises(TypeError, match="GroupNorm.*complex"):
        m(np.zeros((2, 12), np.complex64))


@pytest.mark.parametrize("cls,shape", [("InstanceNorm1d", (3, 4, 9)),
                                       ("InstanceNorm1d", (4, 9)),
                                       ("InstanceNorm2d", (2, 4, 5, 3)),
                                       ("InstanceNorm3d", (2, 4, 3, 2, 5)),
                                       ("InstanceNorm3d", (4, 3, 2, 5))])
@pytest.mark.parametrize("affine,track", [(False, False), (True, False), (True, True),
                                          (False, True)])
def test_instance_norm_train_and_eval(cls, shape, affine, track, rng):
    tm = getattr(torch.nn, cls)(4, affine=affine, track_running_stats=track, momentum=0.3)
    m = getattr(nn, cls)(4, affine=affine, track_running_stats=track, momentum=0.3)
    if affine:
        with torch.no_grad():
            tm.weight.copy_(torch.randn(4))
            tm.bias.copy_(torch.randn(4))
    load_from_torch(m, tm)
    for step in range(2):
        x = (rng.standard_normal(shape) * 2 + step).astype(np.float32)
        close(m.train()(x), tm.train()(t(x)))
    for k, v in tm.state_dict().items():
        close(m.state_dict()[k].numpy(), v)
    x = rng.standard_normal(shape).astype(np.float32)
    close(m.eval()(x), tm.eval()(t(x)))
    assert repr(m) == repr(tm)


def test_instance_norm_bad_input():
    with pytest.raises(ValueError, match="InstanceNorm2d: expected a 3-D"):
        nn.InstanceNorm2d(3)(np.zeros((2, 3, 4, 5, 6)))
    with pytest.raises(ValueError, match=r"InstanceNorm1d\(3\): expected input with 3"):
        nn.InstanceNorm1d(3, affine=True)(np.zeros((2, 4, 5)))
    with pytest.warns(UserWarning, match="num_features is unused"):
        nn.InstanceNorm1d(3)(np.zeros((2, 4, 5)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_functional_and_options(dtype, rng):
    x = rng.standard_normal((3, 4, 5)).astype(dtype)[:, ::2]  # non-contiguous
    w = rng.standard_normal((2, 5)).astype(dtype)
    b = rng.standard_normal((2, 5)).astype(dtype)
    for args in ((None, None), (w, None), (w, b)):
        targs = [None if a is None else t(a) for a in args]
        close(F.layer_norm(x, (2, 5), *args), TF.layer_norm(t(x), (2, 5), *targs))
    tm = torch.nn.LayerNorm(5, bias=False).to(torch.float64 if dtype == np.float64
                                              else torch.float32)
    m = load_from_torch(nn.LayerNorm(5, bias=False, dtype=np.dtype(dtype).name), tm)
    close(m(x), tm(t(x)))
    with pytest.raises(ValueError, match="does not end with normalized_shape"):
        F.layer_norm(x, (3,))


@pytest.mark.parametrize("eps", [None, 1e-3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rms_norm(eps, dtype, rng):
    tdt = torch.float64 if dtype == np.float64 else torch.float32
    tm = torch.nn.RMSNorm((3, 4), eps=eps).to(tdt)
    with torch.no_grad():
        tm.weight.copy_(torch.randn(3, 4, dtype=tdt))
    m = load_from_torch(nn.RMSNorm((3, 4), eps=eps, dtype=np.dtype(dtype).name), tm)
    x = rng.standard_normal((2, 5, 3, 4)).astype(dtype)[:, ::2]
    close(m(x), tm(t(x)))
    close(F.rms_norm(x, (4,), eps=eps), TF.rms_norm(t(x), (4,), eps=eps))
    with pytest.raises(ValueError, match="RMSNorm: .*normalized_shape"):
        m(np.zeros((2, 4, 3)))


@pytest.mark.parametrize("size", [1, 2, 3, 4])
@pytest.mark.parametrize("shape", [(2, 5, 3), (2, 6, 4, 3), (1, 3, 2, 2, 2)])
def test_local_response_norm(size, shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    close(nn.LocalResponseNorm(size, 1e-2, 0.6, 2.0)(x),
          torch.nn.LocalResponseNorm(size, 1e-2, 0.6, 2.0)(t(x)))
    with pytest.raises(ValueError, match="LocalResponseNorm: .*3 or more"):
        nn.LocalResponseNorm(2)(np.zeros((2, 3)))


@pytest.mark.parametrize("training", [False, True])
def test_batch_norm_functional_and_3d(training, rng):
    x = rng.standard_normal((4, 3, 2, 3, 2)).astype(np.float32)
    rm, rv = rng.standard_normal(3).astype(np.float32), rng.random(3).astype(np.float32) + 0.5
    w, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    trm, trv = t(rm.copy()), t(rv.copy())
    want = TF.batch_norm(t(x), trm, trv, t(w), t(b), training, 0.2, 1e-4)
    got = F.batch_norm(x, rm, rv, w, b, training, 0.2, 1e-4)
    close(got, want)
    close(rm, trm)
    close(rv, trv)
    tm = torch.nn.BatchNorm3d(3, momentum=0.2)
    m = load_from_torch(nn.BatchNorm3d(3, momentum=0.2), tm)
    m.train(training)
    tm.train(training)
    close(m(x), tm(t(x)))
    for k, v in tm.state_dict().items():
        close(m.state_dict()[k].numpy(), v)
    with pytest.raises(ValueError, match="BatchNorm3d: expected 5D"):
        m(np.zeros((2, 3, 4)))


def test_instance_norm_functional(rng):
    x = rng.standard_normal((2, 3, 7)).astype(np.float64)
    rm, rv = np.zeros(3), np.ones(3)
    trm, trv = t(rm.copy()), t(rv.copy())
    close(F.instance_norm(x, rm, rv, momentum=0.5), TF.instance_norm(t(x), trm, trv,
                                                                      momentum=0.5))
    close(rm, trm)
    close(rv, trv)
    close(F.instance_norm(x, rm, rv, use_input_stats=False),
          TF.instance_norm(t(x), trm, trv, use_input_stats=False))


@pytest.mark.parametrize("p,dim", [(2, 1), (1, 0), (float("inf"), -1), (3, 1), (0.5, 1)])
def test_normalize(p, dim, rng):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    x[0, :, 0] = 0
    close(F.normalize(x, p, dim), TF.normalize(t(x), p, dim))
    out = np.empty_like(x)
    assert F.normalize(x, p, dim, out=out) is out


# ---- embeddings, distances, bilinear -----------------------------------------------------
def test_embedding_max_norm_renormalises_in_place(rng):
    tm = torch.nn.Embedding(10, 4, max_norm=1.5, norm_type=3.0)
    m = load_from_torch(nn.Embedding(10, 4, max_norm=1.5, norm_type=3.0), tm)
    ids = np.array([[1, 2, 2], [9, 0, 1]])
    with torch.no_grad():
        want = tm(t(ids))
    close(m(ids), want)
    close(m.weight.numpy(), tm.weight)  # the looked-up rows were rescaled, the rest kept
    w0 = m.weight.numpy().copy()
    with pytest.raises(IndexError):
        m(np.array([1, 10]))
    np.testing.assert_array_equal(m.weight.numpy(), w0)
    assert repr(m) == repr(tm)
    w = rng.standard_normal((6, 3)).astype(np.float32) * 3
    tw = t(w.copy())
    close(F.embedding(np.array([0, 5]), w, max_norm=1.0), TF.embedding(t(np.array([0, 5])), tw,
                                                                      max_norm=1.0))
    close(w, tw)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_embedding_bag(mode, padding_idx, include_last_offset, rng):
    tm = torch.nn.EmbeddingBag(7, 5, mode=mode, padding_idx=padding_idx,
                               include_last_offset=include_last_offset)
    m = load_from_torch(nn.EmbeddingBag(7, 5, mode=mode, padding_idx=padding_idx,
                                        include_last_offset=include_last_offset), tm)
    ids = np.array([1, 2, 4, 5, 4, 3, 2, 6, 2, 2])
    offsets = np.array([0, 2, 2, 5, 8]) if not include_last_offset else \
        np.array([0, 2, 2, 5, 8, 10])
    with torch.no_grad():
        close(m(ids, offsets), tm(t(ids), t(offsets)))
        ids2 = rng.integers(0, 7, (3, 4))
        if not include_last_offset:
            close(m(ids2), tm(t(ids2)))
        if mode == "sum":
            psw = rng.standard_normal(ids.size).astype(np.float32)
            close(m(ids, offsets, psw), tm(t(ids), t(offsets), t(psw)))
    assert repr(m) == repr(tm)


def test_embedding_bag_bad_input():
    m = nn.EmbeddingBag(5, 3)
    with pytest.raises(ValueError, match=r"EmbeddingBag\(5, 3, mode='mean'\): .*offsets are "):
        m(np.array([1, 2]))
    with pytest.raises(IndexError, match="EmbeddingBag.*index 5"):
        m(np.array([[1, 5]]))
    with pytest.raises(ValueError, match="only supported for mode='sum'"):
        m(np.array([[1, 2]]), None, np.ones(2))
    with pytest.raises(ValueError, match="offsets\\[0\\] must be 0"):
        m(np.array([1, 2]), np.array([1]))


def test_one_hot():
    x = np.array([[0, 3], [2, 1]])
    close(F.one_hot(x), TF.one_hot(t(x)))
    close(F.one_hot(x, 6), TF.one_hot(t(x), 6))
    with pytest.raises(ValueError, match="one_hot: class values must be smaller"):
        F.one_hot(x, 3)
    with pytest.raises(ValueError, match="non-negative"):
        F.one_hot(np.array([-1]))
    with pytest.raises(TypeError, match="one_hot: indices must be integers"):
        F.one_hot(np.array([1.0]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_distances(dtype, rng):
    a = rng.standard_normal((4, 6, 5)).astype(dtype)
    b = rng.standard_normal((6, 5)).astype(dtype)
    for dim in (1, -1, 0):
        close(nn.CosineSimilarity(dim)(a, b[None].repeat(4, 0)),
              torch.nn.CosineSimilarity(dim)(t(a), t(b[None].repeat(4, 0))))
    close(F.cosine_similarity(a, b, dim=-1), TF.cosine_similarity(t(a), t(b), dim=-1))
    z = np.zeros((2, 3), dtype)
    close(F.cosine_similarity(z, z), TF.cosine_similarity(t(z), t(z)))
    for p in (1.0, 2.0, 3.5, float("inf"), 0.0):
        for keep in (False, True):
            close(nn.PairwiseDistance(p, keepdim=keep)(a, b),
                  torch.nn.PairwiseDistance(p, keepdim=keep)(t(a), t(b)))
    with pytest.raises(ValueError, match="PairwiseDistance: .*do not broadcast"):
        nn.PairwiseDistance()(a, np.zeros((3, 5)))


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bilinear(bias, dtype, rng):
    tdt = torch.float64 if dtype == np.float64 else torch.float32
    tm = torch.nn.Bilinear(5, 3, 7, bias=bias).to(tdt)
    m = load_from_torch(nn.Bilinear(5, 3, 7, bias=bias, dtype=np.dtype(dtype).name), tm)
    x1 = rng.standard_normal((2, 4, 5)).astype(dtype)
    x2 = rng.standard_normal((2, 4, 6)).astype(dtype)[..., ::2]  # non-contiguous
    close(m(x1, x2), tm(t(x1), t(x2)))
    assert repr(m) == repr(tm)
    with pytest.raises(ValueError, match=r"Bilinear: .*input1 \(\*, 5\)"):
        m(x1[..., :4], x2)


# ---- dropout variants, Unflatten, parameter containers ----------------------------------
@pytest.mark.parametrize("cls,shape", [("Dropout1d", (4, 8, 5)), ("Dropout1d", (8, 5)),
                                       ("Dropout2d", (4, 8, 3, 3)), ("Dropout3d", (2, 8, 2, 2, 2)),
                                       ("Dropout3d", (8, 2, 2, 2)), ("AlphaDropout", (50, 40)),
                                       ("FeatureAlphaDropout", (6, 8, 3))])
def test_dropout_variants(cls, shape, rng):
    x = rng.standard_normal(shape).astype(np.float32) + 2
    m = getattr(nn, cls)(0.4)
    assert m.eval()(x) is x
    nn.manual_seed(0)
    y = m.train()(x)
    assert y.shape == x.shape and y.dtype == np.float32
    if cls.startswith("Dropout"):
        ratio = y / x
        lead = len(shape) - {"Dropout1d": 1, "Dropout2d": 2, "Dropout3d": 3}[cls]
        per_channel = ratio.reshape(shape[:lead] + (-1,))
        # whole channels are kept (scaled by 1 / (1 - p)) or zeroed
        assert np.allclose(per_channel, per_channel[..., :1])
        assert {round(float(v), 4) for v in np.unique(per_channel)} <= {0.0, round(1 / 0.6, 4)}
    else:
        a = 1.0 / np.sqrt((1.7580993408473766 ** 2 * 0.4 + 1) * 0.6)
        dropped = -1.7580993408473766 * a + 1.7580993408473766 * a * 0.4
        kept = np.isclose(y, x * a + 1.7580993408473766 * a * 0.4, atol=1e-5)
        assert np.all(kept | np.isclose(y, dropped, atol=1e-5))
    assert repr(m) == repr(getattr(torch.nn, cls)(0.4))
    with pytest.raises(ValueError, match=f"{cls}: dropout probability"):
        getattr(nn, cls)(1.5)


def test_alpha_dropout_keeps_selu_statistics():
    nn.manual_seed(1)
    x = np.random.default_rng(2).standard_normal(400000).astype(np.float32)
    y = F.alpha_dropout(x, 0.3, training=True)
    assert abs(y.mean()) < 0.01 and abs(y.std() - 1) < 0.01


@pytest.mark.parametrize("dim,size", [(1, (2, 4)), (-1, (3, -1)), (0, (1, 3))])
def test_unflatten(dim, size, rng):
    x = rng.standard_normal((3, 8, 6)).astype(np.float32)
    close(nn.Unflatten(dim, size)(x), torch.nn.Unflatten(dim, size)(t(x)))
    assert repr(nn.Unflatten(dim, size)) == repr(torch.nn.Unflatten(dim, size))
    with pytest.raises(ValueError, match="Unflatten: provided sizes"):
        nn.Unflatten(1, (3, 3))(x)


def test_parameter_containers():
    pl = nn.ParameterList([np.ones(3, np.float32), np.zeros((2, 2), np.float32)])
    pl.append(np.full(1, 2.0, np.float32))
    assert len(pl) == 3 and list(pl.state_dict()) == ["0", "1", "2"]
    tl = torch.nn.ParameterList([torch.ones(3), torch.zeros(2, 2), torch.full((1,), 2.0)])
    assert repr(pl).replace("float32", "torch.float32") == repr(tl)
    pl[1] = np.full((2, 2), 5.0, np.float32)
    assert pl[-2].numpy()[0, 0] == 5.0 and len(pl[1:]) == 2
    with pytest.raises(IndexError, match="ParameterList: index 3"):
        pl[3]
    pd = nn.ParameterDict({"a": np.ones(2, np.float32)})
    pd["b"] = np.zeros(3, np.float32)
    assert list(pd) == ["a", "b"] and "a" in pd and len(pd) == 2
    assert sorted(pd.state_dict()) == ["a", "b"]
    pd.load_state_dict({"a": np.array([3.0, 4.0]), "b": np.ones(3)})
    assert pd["a"].numpy().tolist() == [3.0, 4.0]
    assert pd.pop("a").shape == (2,) and list(pd.keys()) == ["b"]
    outer = nn.Sequential()
    outer.add_module("params", nn.ParameterList([np.ones(2, np.float32)]))
    assert list(outer.state_dict()) == ["params.0"]


# ---- losses ------------------------------------------------------------------------------
REDUCTIONS = ["none", "mean", "sum"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pointwise_losses(reduction, dtype, rng):
    x = rng.standard_normal((3, 5, 2)).astype(dtype)
    y = rng.standard_normal((3, 5, 2)).astype(dtype)[:, ::-1]  # non-contiguous
    p = 1 / (1 + np.exp(-x))
    q = rng.random((3, 5, 2)).astype(dtype)
    s = np.sign(rng.standard_normal((3, 5, 2))).astype(dtype)
    cases = [
        ("L1Loss", {}, (x, y)), ("MSELoss", {}, (x, y)), ("HuberLoss", {"delta": 0.5}, (x, y)),
        ("SmoothL1Loss", {"beta": 0.7}, (x, y)), ("SmoothL1Loss", {"beta": 0.0}, (x, y)),
        ("BCELoss", {}, (p, q)), ("BCEWithLogitsLoss", {}, (x, q)),
        ("BCEWithLogitsLoss", {"pos_weight": torch.tensor([1.5, 0.5], dtype=torch.float64)},
         (x, q)),
        ("KLDivLoss", {}, (x, q)), ("KLDivLoss", {"log_target": True}, (x, y)),
        ("SoftMarginLoss", {}, (x, s)), ("HingeEmbeddingLoss", {"margin": 0.5}, (x, s)),
        ("PoissonNLLLoss", {}, (x, q * 3)),
        ("PoissonNLLLoss", {"log_input": False, "full": True}, (p, q * 3)),
        ("MultiLabelSoftMarginLoss", {}, (x[:, :, 0], (q[:, :, 0] > 0.5).astype(dtype))),
    ]
    for name, kw, args in cases:
        tkw = dict(kw, reduction=reduction)
        tm = getattr(torch.nn, name)(**tkw)
        mkw = {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in tkw.items()}
        m = getattr(nn, name)(**mkw)
        close(m(*args), tm(*(t(a) for a in args)), rtol=1e-4, atol=1e-5)
    close(F.gaussian_nll_loss(x, y, q + 0.1, reduction=reduction),
          TF.gaussian_nll_loss(t(x), t(y), t(q + 0.1), reduction=reduction))
    close(F.gaussian_nll_loss(x, y, (q + 0.1)[..., 0], full=True, reduction=reduction),
          TF.gaussian_nll_loss(t(x), t(y), t((q + 0.1)[..., 0]), full=True,
                               reduction=reduction))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", [(6, 4), (4,), (3, 4, 5, 2)])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_and_nll(reduction, shape, weighted, smoothing, rng):
    x = rng.standard_normal(shape).astype(np.float32) * 3
    c = shape[1] if len(shape) > 1 else shape[0]
    tshape = shape[:1] + shape[2:] if len(shape) > 1 else ()
    y = rng.integers(0, c, tshape)
    y = np.where(rng.random(tshape) < 0.3, 1, y) if tshape else y
    w = rng.random(c).astype(np.float32) + 0.5 if weighted else None
    tw = None if w is None else t(w)
    kw = dict(weight=w, ignore_index=1, reduction=reduction, label_smoothing=smoothing)
    close(nn.CrossEntropyLoss(**kw)(x, y),
          torch.nn.CrossEntropyLoss(**dict(kw, weight=tw))(t(x), t(y)))
    probs = rng.random(shape).astype(np.float32)
    kw.pop("ignore_index")
    close(F.cross_entropy(x, probs, **kw), TF.cross_entropy(t(x), t(probs),
                                                            **dict(kw, weight=tw)))
    logp = TF.log_softmax(t(x), 1 if len(shape) > 1 else 0).numpy()
    close(nn.NLLLoss(w, ignore_index=1, reduction=reduction)(logp, y),
          torch.nn.NLLLoss(tw, ignore_index=1, reduction=reduction)(t(logp), t(y)))


def test_classification_loss_bad_input():
    x = np.zeros((3, 4), np.float32)
    with pytest.raises(IndexError, match="CrossEntropyLoss: cross_entropy: target 4"):
        nn.CrossEntropyLoss()(x, np.array([0, 4, 1]))
    with pytest.raises(ValueError, match="NLLLoss: .*expected target of shape"):
        nn.NLLLoss()(x, np.array([0, 1]))
    with pytest.raises(ValueError, match="BCELoss: .*between 0 and 1"):
        nn.BCELoss()(x + 2, x)
    with pytest.raises(ValueError, match="is not a valid value for reduction"):
        nn.MSELoss(reduction="avg")
    with pytest.raises(TypeError, match="NLLLoss.*indices must be integers"):
        nn.NLLLoss()(x, np.array([0.0, 1.0, 1.0]))


def test_all_ignored_mean_is_nan():
    x = np.zeros((2, 3), np.float32)
    y = np.array([-100, -100])
    close(F.cross_entropy(x, y), TF.cross_entropy(t(x), t(y)))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_margin_and_embedding_losses(reduction, rng):
    a, b, c = (rng.standard_normal((5, 6)).astype(np.float32) for _ in range(3))
    s = np.array([1, -1, 1, -1, -1], np.float32)
    r = dict(reduction=reduction)
    close(nn.CosineEmbeddingLoss(0.2, **r)(a, b, s),
          torch.nn.CosineEmbeddingLoss(0.2, **r)(t(a), t(b), t(s)))
    close(nn.MarginRankingLoss(0.3, **r)(a[:, 0], b[:, 0], s),
          torch.nn.MarginRankingLoss(0.3, **r)(t(a[:, 0]), t(b[:, 0]), t(s)))
    for p, swap in ((2.0, False), (1.0, True), (3.0, False)):
        close(nn.TripletMarginLoss(0.5, p, swap=swap, **r)(a, b, c),
              torch.nn.TripletMarginLoss(0.5, p, swap=swap, **r)(t(a), t(b), t(c)))
    y = rng.integers(0, 6, 5)
    w = rng.random(6).astype(np.float32)
    for p in (1, 2):
        close(nn.MultiMarginLoss(p, 0.7, w, **r)(a, y),
              torch.nn.MultiMarginLoss(p, 0.7, t(w), **r)(t(a), t(y)))
    ml = np.array([[3, 0, -1, 1, 2, 2], [1, 2, 3, 4, 5, 0], [-1, 0, 0, 0, 0, 0],
                   [5, -1, 0, 0, 0, 0], [0, 0, -1, 0, 0, 0]])
    close(nn.MultiLabelMarginLoss(**r)(a, ml), torch.nn.MultiLabelMarginLoss(**r)(t(a), t(ml)))
    close(F.multilabel_margin_loss(a[0], ml[0], reduction=reduction),
          TF.multilabel_margin_loss(t(a[0]), t(ml[0]), reduction=reduction))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss(reduction, zero_infinity, rng):
    tlen, n, c = 12, 3, 5
    lp = TF.log_softmax(torch.randn(tlen, n, c, generator=torch.Generator().manual_seed(0)),
                        2).numpy()
    targets = np.array([[1, 2, 2, 0], [3, 3, 4, 1], [1, 4, 4, 4]])
    il = np.array([12, 9, 3])  # the last cannot emit 4 labels with a repeat in 3 steps
    tl = np.array([3, 4, 4])
    kw = dict(reduction=reduction, zero_infinity=zero_infinity)
    close(nn.CTCLoss(blank=0, **kw)(lp, targets, il, tl),
          torch.nn.CTCLoss(blank=0, **kw)(t(lp), t(targets), t(il), t(tl)), rtol=1e-4)
    flat = np.concatenate([targets[i, :tl[i]] for i in range(n)])
    close(F.ctc_loss(lp, flat, il, tl, blank=0, **kw),
          TF.ctc_loss(t(lp), t(flat), t(il), t(tl), blank=0, **kw), rtol=1e-4)
    with pytest.raises(ValueError, match="CTCLoss: .*other than blank"):
        nn.CTCLoss()(lp, np.array([[0, 1]] * 3), il, np.array([2, 2, 2]))


def test_loss_state_dict_keys():
    w = np.ones(4, np.float32)
    assert list(nn.CrossEntropyLoss(w).state_dict()) == \
        list(torch.nn.CrossEntropyLoss(torch.ones(4)).state_dict())
    assert list(nn.BCEWithLogitsLoss(pos_weight=w).state_dict()) == \
        list(torch.nn.BCEWithLogitsLoss(pos_weight=torch.ones(4)).state_dict())
    assert nn.MSELoss(size_average=False).reduction == "sum"
    assert nn.MSELoss(reduce=False).reduction == "none"


@pytest.mark.parametrize("out_features,bias,smoothing", [((), False, 0.0), ((2,), True, 0.1)])
def test_linear_cross_entropy_loss(out_features, bias, smoothing, rng):
    kw = dict(out_features=out_features, bias=bias, label_smoothing=smoothing,
              reduction="none")
    tm = torch.nn.LinearCrossEntropyLoss(5, 3, **kw)
    m = load_from_torch(nn.LinearCrossEntropyLoss(5, 3, **kw), tm)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    y = rng.integers(0, 3, (4,) + out_features)
    with torch.no_grad():
        close(m(x, y), tm(t(x), t(y)))
    assert repr(m) == repr(tm)  # after the first forward packed the projection too


def test_compiled_save_and_load(tmp_path, rng):
    """A compiled module of these layers and functions saves and loads (the closed tables of
    modulekit.compile.serialize know them), and gives the same answer."""
    import modulekit

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.gn = nn.GroupNorm(2, 8)
            self.inorm = nn.InstanceNorm2d(8, affine=True, track_running_stats=True)
            self.prelu = nn.PReLU(8)
            self.rms = nn.RMSNorm(5)
            self.lrn = nn.LocalResponseNorm(3)
            self.drop = nn.Dropout2d()

        def forward(self, x):
            y = self.drop(self.prelu(self.inorm(F.mish(self.gn(self.conv(x))))))
            return self.rms(F.log_softmax(self.lrn(F.group_norm(y, 4)), 1))

    m = Net().eval()
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    want = m(x)
    m.compile()
    np.testing.assert_array_equal(m(x), want)
    m.save(tmp_path / "net.mk")
    np.testing.assert_array_equal(modulekit.load_module(tmp_path / "net.mk")(x), want)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("swap", [False, True])
def test_triplet_margin_with_distance_loss(reduction, swap, rng):
    a, p, n = (rng.standard_normal((6, 4)).astype(np.float32) for _ in range(3))
    kw = dict(margin=0.7, swap=swap, reduction=reduction)
    close(nn.TripletMarginWithDistanceLoss(**kw)(a, p, n),
          torch.nn.TripletMarginWithDistanceLoss(**kw)(t(a), t(p), t(n)))
    cos = nn.TripletMarginWithDistanceLoss(
        distance_function=lambda x, y: 1 - F.cosine_similarity(x, y), **kw)
    tcos = torch.nn.TripletMarginWithDistanceLoss(
        distance_function=lambda x, y: 1 - TF.cosine_similarity(x, y), **kw)
    close(cos(a, p, n), tcos(t(a), t(p), t(n)))


@pytest.mark.parametrize("head_bias", [False, True])
def test_adaptive_log_softmax(head_bias, rng):
    tm = torch.nn.AdaptiveLogSoftmaxWithLoss(8, 20, [4, 9, 15], div_value=2.0,
                                             head_bias=head_bias)
    m = load_from_torch(nn.AdaptiveLogSoftmaxWithLoss(8, 20, [4, 9, 15], div_value=2.0,
                                                      head_bias=head_bias), tm)
    x = rng.standard_normal((7, 8)).astype(np.float32)
    y = np.array([0, 3, 4, 8, 9, 14, 19])
    with torch.no_grad():
        want = tm(t(x), t(y))
        close(m(x, y).output, want.output)
        close(m(x, y).loss, want.loss)
        close(m(x[0], y[0]).output, tm(t(x[0]), t(y[0])).output)
        close(m.log_prob(x), tm.log_prob(t(x)))
        np.testing.assert_array_equal(m.predict(x), tm.predict(t(x)).numpy())
    assert repr(m) == repr(tm)
    with pytest.raises(IndexError, match="AdaptiveLogSoftmaxWithLoss: target values"):
        m(x, np.array([0, 1, 2, 3, 4, 5, 20]))
    with pytest.raises(ValueError, match="cutoffs should be"):
        nn.AdaptiveLogSoftmaxWithLoss(8, 20, [4, 25])

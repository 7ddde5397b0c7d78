"""nn.Conv2d, BatchNorm1d/2d, pooling layers and Hardswish against torch.nn, and the packing
contract (state_dict, load_state_dict, to, initialize, pickling, threads, Conv+BN fusion)."""

import pickle
import threading

import numpy as np
import pytest

pytest.importorskip("modulekit.module")
torch = pytest.importorskip("torch")
tnn = torch.nn

import modulekit as mk  # noqa: E402
from modulekit import nn as _nn  # noqa: E402
from modulekit.nn.modules import batchnorm, pooling  # noqa: E402
from modulekit.nn.modules.conv import Conv2d  # noqa: E402

# the layers from their own modules (modulekit.nn re-exports them once they are wired in)
nn = type(
    "nn",
    (),
    dict(
        Conv2d=Conv2d,
        BatchNorm1d=batchnorm.BatchNorm1d,
        BatchNorm2d=batchnorm.BatchNorm2d,
        MaxPool2d=pooling.MaxPool2d,
        AvgPool2d=pooling.AvgPool2d,
        AdaptiveAvgPool2d=pooling.AdaptiveAvgPool2d,
        Hardswish=_nn.Hardswish,
        Sequential=_nn.Sequential,
        StateDictError=_nn.StateDictError,
    ),
)

CONV_CONFIGS = [
    dict(in_channels=3, out_channels=8, kernel_size=3),
    dict(in_channels=4, out_channels=6, kernel_size=(3, 5), stride=(2, 1), padding=(1, 2)),
    dict(in_channels=4, out_channels=8, kernel_size=3, padding="same", dilation=2, groups=2),
    dict(in_channels=6, out_channels=6, kernel_size=3, stride=2, padding=1, groups=6),
    dict(in_channels=5, out_channels=7, kernel_size=1, bias=False),
    dict(in_channels=3, out_channels=4, kernel_size=4, padding="same"),
    dict(in_channels=3, out_channels=4, kernel_size=2, padding="valid", stride=3),
]


def torch_pair(cfg):
    tconv = tnn.Conv2d(**cfg)
    conv = nn.Conv2d(**cfg)
    conv.load_state_dict(tconv.state_dict())
    return tconv, conv


@pytest.mark.parametrize("cfg", CONV_CONFIGS)
def test_conv2d_matches_torch(rng, cfg):
    tconv, conv = torch_pair(cfg)
    assert repr(conv) == repr(tconv)
    x = rng.standard_normal((2, cfg["in_channels"], 11, 10)).astype(np.float32)
    with torch.no_grad():
        ref = tconv(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(conv(x), ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(conv(x[0]), ref[0], rtol=1e-4, atol=1e-5)  # unbatched
    np.testing.assert_allclose(conv(mk.Tensor(x)), ref, rtol=1e-4, atol=1e-5)


def test_conv2d_packing_contract(rng):
    tconv, conv = torch_pair(dict(in_channels=3, out_channels=5, kernel_size=3, padding=1))
    x = rng.standard_normal((1, 3, 7, 7)).astype(np.float32)
    assert set(conv.state_dict()) == {"weight", "bias"}
    conv.initialize()
    assert conv.state_dict() == {} and list(conv.parameters()) == []
    # a packed layer still takes its keys and re-packs
    t2 = tnn.Conv2d(3, 5, 3, padding=1)
    conv.load_state_dict(t2.state_dict())
    with torch.no_grad():
        np.testing.assert_allclose(conv(x), t2(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(nn.StateDictError, match=r"\(5, 3, 3, 3\)"):
        conv.load_state_dict({"weight": np.zeros((5, 3, 2, 2)), "bias": np.zeros(5)})
    # to(dtype) re-packs in 16 bits, and back
    conv.to(mk.float16)
    w16 = t2.weight.detach().half().float()
    b16 = t2.bias.detach().half().float()
    ref16 = torch.nn.functional.conv2d(torch.from_numpy(x), w16, b16, padding=1).numpy()
    np.testing.assert_allclose(conv(x), ref16, rtol=1e-4, atol=1e-4)
    conv.to(mk.float64)
    assert conv(x).dtype == np.float64
    # pickling keeps the raw weights
    conv2 = pickle.loads(pickle.dumps(conv))
    np.testing.assert_allclose(conv2(x), conv(x))


def test_conv2d_concurrent_first_forward(rng):
    conv = nn.Conv2d(8, 16, 3, padding=1)
    x = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
    outs, errors = [None] * 6, []

    def work(i):
        try:
            outs[i] = conv(x)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


def test_conv2d_errors():
    conv = nn.Conv2d(3, 8, 3)
    with pytest.raises(ValueError, match=r"Conv2d\(3, 8, kernel_size=\(3, 3\).*3 channels, got 4"):
        conv(np.zeros((1, 4, 8, 8), np.float32))
    with pytest.raises(ValueError, match=r"Conv2d\(3, 8.*smaller than the dilated kernel"):
        conv(np.zeros((1, 3, 2, 2), np.float32))
    with pytest.raises(ValueError, match=r"Conv2d\(3, 8.*4-D"):
        conv(np.zeros((3, 8), np.float32))
    # padding_mode='reflect' is implemented (tests/test_conv_nd.py); its limits are torch's
    with pytest.raises(ValueError, match=r"Conv2d: padding_mode='reflect' needs each padding"):
        nn.Conv2d(3, 8, 3, padding=2, padding_mode="reflect")(np.zeros((1, 3, 2, 8), np.float32))
    with pytest.raises(ValueError, match="padding_mode"):
        nn.Conv2d(3, 8, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 8, 3, groups=2)
    with pytest.raises(ValueError, match="strided"):
        nn.Conv2d(3, 8, 3, stride=2, padding="same")
    with pytest.raises(TypeError, match="floating"):
        nn.Conv2d(3, 8, 3, dtype=mk.int32)


class _ConvBNAct(_nn.Module):
    """``act(bn(conv(x)) + res)`` as a user writes it (compiled: one folded kernel)."""

    def __init__(self, conv, bn, act):
        super().__init__()
        self.conv, self.bn = conv, bn
        self.act = {None: _nn.Identity(), "relu": _nn.ReLU(), "relu6": _nn.ReLU6()}[act]

    def forward(self, x, res):
        return self.act(self.bn(self.conv(x)) + res)


@pytest.mark.parametrize("act", [None, "relu", "relu6"])
def test_conv_bn_fusion(rng, act):
    tconv, conv = torch_pair(dict(in_channels=4, out_channels=6, kernel_size=3, padding=1))
    tbn = tnn.BatchNorm2d(6).eval()
    with torch.no_grad():
        tbn.running_mean.copy_(torch.randn(6))
        tbn.running_var.copy_(torch.rand(6) + 0.5)
        tbn.weight.copy_(torch.randn(6))
        tbn.bias.copy_(torch.randn(6))
    bn = nn.BatchNorm2d(6)
    bn.load_state_dict(tbn.state_dict())
    bn.eval()
    x = rng.standard_normal((2, 4, 9, 9)).astype(np.float32)
    res = rng.standard_normal((2, 6, 9, 9)).astype(np.float32)
    fns = {None: lambda t: t, "relu": torch.relu, "relu6": tnn.functional.relu6}
    m = _ConvBNAct(conv, bn, act).eval()
    m.compile(fullgraph=True)

    def planned():
        m(x, res)
        out = m(x, res)
        rules = m._compiled.last.plan.graph.meta["rules"]
        assert rules["conv_bn_fold"] == 1 and rules["conv_residual_add"] == 1
        return out

    with torch.no_grad():
        ref = fns[act](tbn(tconv(torch.from_numpy(x))) + torch.from_numpy(res)).numpy()
    np.testing.assert_allclose(planned(), ref, rtol=1e-4, atol=1e-4)
    # new statistics loaded into the tree are folded again
    parent = nn.Sequential(conv, bn)
    state = {
        "0.weight": tconv.weight,
        "0.bias": tconv.bias,
        "1.weight": tbn.weight,
        "1.bias": tbn.bias,
        "1.running_mean": tbn.running_mean * 2,
        "1.running_var": tbn.running_var,
        "1.num_batches_tracked": tbn.num_batches_tracked,
    }
    parent.load_state_dict(state)
    with torch.no_grad():
        tbn.running_mean.mul_(2)
        ref = fns[act](tbn(tconv(torch.from_numpy(x))) + torch.from_numpy(res)).numpy()
    np.testing.assert_allclose(planned(), ref, rtol=1e-4, atol=1e-4)
    # the norm's tensors replaced by assignment are folded again too; eps is a plain
    # attribute the plan cannot see change: compile() again after setting it
    with torch.no_grad():
        tbn.running_var.mul_(3)
        tbn.weight.add_(1)
        tbn.eps = 1e-2
        ref = fns[act](tbn(tconv(torch.from_numpy(x))) + torch.from_numpy(res)).numpy()
    bn.running_var = mk.Tensor(tbn.running_var.numpy().copy())
    bn.weight = mk.Parameter(tbn.weight.detach().numpy().copy())
    bn.eps = 1e-2
    m.compile(fullgraph=True)
    np.testing.assert_allclose(planned(), ref, rtol=1e-4, atol=1e-4)
    # and in a fused Sequential (Conv2d + BatchNorm2d run as one kernel)
    seq = nn.Sequential(conv, bn).eval().initialize()
    seq(x)
    with torch.no_grad():
        tbn.running_mean.sub_(1)
        ref = tbn(tconv(torch.from_numpy(x))).numpy()
    bn.running_mean = mk.Tensor(tbn.running_mean.numpy().copy())
    np.testing.assert_allclose(seq(x), ref, rtol=1e-4, atol=1e-4)



@pytest.mark.parametrize(
    "cls,shape",
    [("BatchNorm1d", (6, 5)), ("BatchNorm1d", (4, 5, 7)), ("BatchNorm2d", (3, 5, 4, 6))],
)
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"momentum": None}, {"affine": False}, {"track_running_stats": False}, {"momentum": 0.3}],
)
def test_batchnorm_matches_torch(rng, cls, shape, kwargs):
    tbn = getattr(tnn, cls)(5, **kwargs)
    bn = getattr(nn, cls)(5, **kwargs)
    assert repr(bn) == repr(tbn)
    bn.load_state_dict(tbn.state_dict())
    for _ in range(3):
        x = (rng.standard_normal(shape) * 2 + 1).astype(np.float32)
        with torch.no_grad():
            ref = tbn(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(bn(x), ref, rtol=1e-4, atol=1e-5)
    for key, value in tbn.state_dict().items():
        np.testing.assert_allclose(
            np.asarray(bn.state_dict()[key]), value.numpy(), rtol=1e-5, atol=1e-6, err_msg=key
        )
    tbn.eval()
    bn.eval()
    x = rng.standard_normal(shape).astype(np.float32)
    with torch.no_grad():
        np.testing.assert_allclose(bn(x), tbn(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-5)


def test_batchnorm_errors():
    with pytest.raises(ValueError, match="expected 4D input"):
        nn.BatchNorm2d(3)(np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match="expected 2D or 3D input"):
        nn.BatchNorm1d(3)(np.zeros((2, 3, 4, 5)))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="3 channels, got 4"):
        nn.BatchNorm2d(3)(np.zeros((2, 4, 2, 2)))


def test_pooling_layers(rng):
    x = rng.standard_normal((2, 3, 11, 9)).astype(np.float32)
    pairs = [
        (nn.MaxPool2d(3, 2, 1), tnn.MaxPool2d(3, 2, 1)),
        (nn.MaxPool2d(2, ceil_mode=True), tnn.MaxPool2d(2, ceil_mode=True)),
        (
            nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
            tnn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
        ),
        (nn.AdaptiveAvgPool2d((4, 3)), tnn.AdaptiveAvgPool2d((4, 3))),
        (nn.Hardswish(), tnn.Hardswish()),
    ]
    for ours, theirs in pairs:
        assert repr(ours) == repr(theirs)
        with torch.no_grad():
            ref = theirs(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(ours(x), ref, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"MaxPool2d\(kernel_size=5.*too small"):
        nn.MaxPool2d(5)(np.zeros((1, 1, 3, 3), np.float32))
    # return_indices=True is supported (tests/test_resample.py covers it against torch)
    values, indices = nn.MaxPool2d(2, return_indices=True)(x)
    np.testing.assert_array_equal(values, nn.MaxPool2d(2)(x))
    assert indices.dtype == np.int64 and indices.shape == values.shape


def test_functional_conv2d(rng):
    from modulekit.nn.functional import conv2d

    x = rng.standard_normal((2, 4, 9, 8))
    w = rng.standard_normal((6, 2, 3, 3))
    b = rng.standard_normal(6)
    ref = torch.nn.functional.conv2d(
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), 2, 1, 1, 2
    ).numpy()
    y = conv2d(x, w, b, stride=2, padding=1, groups=2)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)
    y32 = conv2d(x.astype(np.float32), w.astype(np.float32), b.astype(np.float32), 2, 1, 1, 2)
    np.testing.assert_allclose(y32, ref, rtol=1e-4, atol=1e-4)

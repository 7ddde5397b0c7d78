"""The planner's convolution rules (modulekit.compile.rules.conv): each fires on its pattern,
computes what torch computes, keeps the bits it promises (fused vs the unfused steps), stops
at hooked modules and leaves groups read from outside alone."""

import numpy as np
import pytest

from modulekit import nn
from modulekit.compile.rules import PIPELINE
from modulekit.nn import functional as F

torch = pytest.importorskip("torch")
tnn = torch.nn

CONV_RULES = ("conv_bn_fold", "conv_residual_add", "conv_activation", "conv_maxpool",
              "conv_global_avgpool", "depthwise_chain")


def _stats(model, rng):
    """Random running statistics and affine parameters for every norm of ``model``."""
    state = {}
    for k, v in model.state_dict().items():
        a = np.asarray(v)
        if k.endswith("running_var"):
            state[k] = rng.uniform(0.5, 1.5, a.shape).astype(a.dtype)
        elif k.endswith("running_mean") or (k.endswith("bias") and a.ndim == 1):
            state[k] = (rng.standard_normal(a.shape) * 0.2).astype(a.dtype)
        elif k.endswith("weight") and a.ndim == 1:
            state[k] = rng.uniform(0.5, 1.5, a.shape).astype(a.dtype)
    model.load_state_dict(state, strict=False)
    return model


def _torch_copy(model, tmodel):
    """``tmodel`` (torch) with ``model``'s weights, in eval mode."""
    state = model.state_dict(include_packed=True)
    tmodel.load_state_dict({k: torch.from_numpy(np.asarray(v).copy()) for k, v in state.items()})
    return tmodel.eval()


def _plan(m, *args):
    """Compile ``m``, call it twice; (output, rules fired, the plan's fused steps)."""
    m.eval().compile(fullgraph=True)
    first = m(*args)
    out = m(*args)
    if any(sub._has_hooks for sub in m.modules()):
        # hooks inside: the capture call ran forward (its hooks fire once), not the plan
        np.testing.assert_allclose(first, out, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(first, out)  # the capture call returns the plan's
    plan = m._compiled.last.plan
    fused = [n for n in plan.graph.nodes if n.op == "call_fused"]
    return out, plan.graph.meta["rules"], fused


def _fired(rules):
    return {k: v for k, v in rules.items() if v}


def _eager(m, *args):
    """``m``'s forward run layer by layer (its compiled plan switched off)."""
    m.compile(disable=True)
    try:
        return m(*args)
    finally:
        m.compile(fullgraph=True)


# ------------------------------------------------------------------ the rules, one by one
class ConvBN(nn.Module):
    def __init__(self, act=None, bias=False, k=3, stride=1, groups=1, cin=8, cout=16):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=bias)
        self.bn = nn.BatchNorm2d(cout)
        self.act = act

    def forward(self, x):
        y = self.bn(self.conv(x))
        return self.act(y) if self.act is not None else y


class TConvBN(tnn.Module):
    def __init__(self, act=None, bias=False, k=3, stride=1, groups=1, cin=8, cout=16):
        super().__init__()
        self.conv = tnn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=bias)
        self.bn = tnn.BatchNorm2d(cout)
        self.act = act

    def forward(self, x):
        y = self.bn(self.conv(x))
        return self.act(y) if self.act is not None else y


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("k, stride, groups", [(3, 1, 1), (1, 1, 1), (3, 2, 1), (3, 1, 8)])
def test_conv_bn_fold_matches_torch(rng, bias, k, stride, groups):
    m = _stats(ConvBN(bias=bias, k=k, stride=stride, groups=groups, cout=8 if groups > 1
                      else 16), rng)
    t = _torch_copy(m, TConvBN(bias=bias, k=k, stride=stride, groups=groups,
                               cout=8 if groups > 1 else 16))
    x = rng.standard_normal((3, 8, 11, 9)).astype(np.float32)
    out, rules, fused = _plan(m, x)
    assert _fired(rules) == {"conv_bn_fold": 1}
    assert fused[0].meta["modules"] == ["conv", "bn"]
    with torch.no_grad():
        np.testing.assert_allclose(out, t(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out, _eager(m, x), rtol=1e-5, atol=1e-6)
    # the batch is symbolic; a non-contiguous input; a wrong channel count names the layer
    np.testing.assert_allclose(m(x[:1]), out[:1], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(m(np.ascontiguousarray(x[:, :, ::-1])[:, :, ::-1]), out,
                               rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"Conv2d\(8, .*channels"):
        m(np.zeros((1, 5, 11, 9), np.float32))


def test_conv_bn_fold_float64(rng):
    m = _stats(ConvBN(act=nn.ReLU()), rng).to(np.float64)
    t = _torch_copy(m, TConvBN(act=tnn.ReLU()).double())
    x = rng.standard_normal((2, 8, 7, 7))
    out, rules, _ = _plan(m, x)
    assert out.dtype == np.float64
    assert rules["conv_bn_fold"] == 1 and rules["conv_activation"] == 1
    with torch.no_grad():
        np.testing.assert_allclose(out, t(torch.from_numpy(x)).numpy(), rtol=1e-10, atol=1e-12)


def test_conv_bn_fold_is_the_sequentials_fold(rng):
    """The rule folds with the same function as a Sequential's eager fused call: the same
    bits."""
    seq = _stats(nn.Sequential(nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                               nn.ReLU6()), rng).eval().initialize()
    x = rng.standard_normal((2, 8, 10, 10)).astype(np.float32)
    eager = seq(x)  # Sequential's fused call (Conv2d._forward_fused)
    out, rules, _ = _plan(seq, x)
    assert rules["conv_bn_fold"] == 1 and rules["conv_activation"] == 1
    np.testing.assert_array_equal(out, eager)


def test_conv_bn_fold_not_in_training_mode_or_without_statistics(rng):
    m = _stats(ConvBN(), rng)
    x = rng.standard_normal((2, 8, 6, 6)).astype(np.float32)
    m.train().compile()
    m(x)
    m(x)
    assert not _fired(m._compiled.last.plan.graph.meta["rules"])
    m2 = ConvBN()
    m2.bn = nn.BatchNorm2d(16, track_running_stats=False)
    _, rules, _ = _plan(m2, x)
    assert not _fired(rules)


@pytest.mark.parametrize("act, tact", [(nn.ReLU(), tnn.ReLU()), (nn.ReLU6(), tnn.ReLU6()),
                                       (nn.Hardswish(), tnn.Hardswish()),
                                       (F.relu, torch.relu), (F.relu6, tnn.functional.relu6),
                                       (F.hardswish, tnn.functional.hardswish)])
def test_conv_activation_keeps_bits(isa, rng, act, tact):
    """Epilogue vs the activation after the folded convolution: the same bits on every
    instruction set, NaN and infinities included."""
    m = _stats(ConvBN(act=act), rng)
    t = _torch_copy(m, TConvBN(act=tact))
    x = rng.standard_normal((2, 8, 9, 9)).astype(np.float32) * 3
    out, rules, fused = _plan(m, x)
    assert _fired(rules) == {"conv_bn_fold": 1, "conv_activation": 1}
    # the same folded kernel, then the activation as its own step
    step = fused[0].fn
    plain = step.with_(activation=None)(x)
    np.testing.assert_array_equal(out, act(plain))
    with torch.no_grad():
        np.testing.assert_allclose(out, t(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-5)
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(m(x), act(step.with_(activation=None)(x)))


@pytest.mark.parametrize("act", [nn.SiLU(), nn.GELU(), nn.GELU(approximate="tanh"),
                                 nn.Sigmoid(), nn.Tanh(), F.silu, F.gelu])
def test_transcendental_epilogues_keep_bits(isa, rng, act):
    """SiLU, GELU, Sigmoid, Tanh in the epilogue: the one activation math of kernels/common,
    so the same bits as the activation after the folded convolution."""
    m = _stats(ConvBN(act=act), rng)
    x = rng.standard_normal((2, 8, 9, 9)).astype(np.float32) * 3
    out, rules, fused = _plan(m, x)
    assert _fired(rules) == {"conv_bn_fold": 1, "conv_activation": 1}
    np.testing.assert_array_equal(out, act(fused[0].fn.with_(activation=None)(x)))


class Residual(nn.Module):
    """torchvision's BasicBlock tail: ``relu(bn(conv(x)) + identity)`` in three spellings."""

    def __init__(self, how):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.how = how

    def forward(self, x):
        out = self.bn(self.conv(x))
        if self.how == "iadd":
            out += x
        elif self.how == "radd":
            out = x + out
        else:
            out = np.add(out, x)
        return self.relu(out)


@pytest.mark.parametrize("how", ["iadd", "radd", "np.add"])
def test_conv_residual_add(isa, rng, how):
    m = _stats(Residual(how), rng)
    x = rng.standard_normal((2, 8, 9, 7)).astype(np.float32)
    out, rules, fused = _plan(m, x)
    assert _fired(rules) == {"conv_bn_fold": 1, "conv_residual_add": 1, "conv_activation": 1}
    assert fused[0].meta["modules"] == ["conv", "bn", "relu"]
    step = fused[0].fn
    # bit for bit the folded convolution, then the add, then the ReLU
    np.testing.assert_array_equal(out, np.maximum(step.with_(activation=None)(x) + x, 0))
    tm = tnn.Sequential(tnn.Conv2d(8, 8, 3, padding=1, bias=False), tnn.BatchNorm2d(8))
    tm.load_state_dict({k.replace("conv.", "0.").replace("bn.", "1."): torch.from_numpy(
        np.asarray(v).copy()) for k, v in m.state_dict(include_packed=True).items()})
    with torch.no_grad():
        xt = torch.from_numpy(x)
        ref = torch.relu(tm.eval()(xt) + xt).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_residual_of_another_shape_or_dtype_is_not_fused(rng):
    class Broadcast(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 8, 1)

        def forward(self, x, b):
            return self.conv(x) + b

    m = Broadcast()
    x = rng.standard_normal((2, 8, 5, 5)).astype(np.float32)
    for b in (np.ones((1, 8, 1, 1), np.float32), np.ones((2, 8, 5, 5), np.float64)):
        out, rules, _ = _plan(m, x, b)
        assert not _fired(rules)
        np.testing.assert_array_equal(out, m.conv(x) + b)
        m.compile(disable=True)


class Stem(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)

    def forward(self, x):
        return self.maxpool(self.relu(self.bn1(self.conv1(x))))


def test_conv_maxpool_stem(isa, rng):
    m = _stats(Stem(), rng)
    x = rng.standard_normal((2, 3, 33, 40)).astype(np.float32)
    out, rules, fused = _plan(m, x)
    assert _fired(rules) == {"conv_bn_fold": 1, "conv_activation": 1, "conv_maxpool": 1}
    assert fused[0].meta["modules"] == ["conv1", "bn1", "relu", "maxpool"]
    step = fused[0].fn
    np.testing.assert_array_equal(out, m.maxpool(step.with_(pool=None)(x)))
    t = tnn.Sequential(tnn.Conv2d(3, 16, 7, 2, 3, bias=False), tnn.BatchNorm2d(16), tnn.ReLU(),
                       tnn.MaxPool2d(3, 2, 1))
    t.load_state_dict({k.replace("conv1.", "0.").replace("bn1.", "1."): torch.from_numpy(
        np.asarray(v).copy()) for k, v in m.state_dict(include_packed=True).items()})
    with torch.no_grad():
        np.testing.assert_allclose(out, t.eval()(torch.from_numpy(x)).numpy(), rtol=1e-4,
                                   atol=1e-5)


class Head(nn.Module):
    def __init__(self, how):
        super().__init__()
        self.conv = nn.Conv2d(16, 32, 1, bias=False)
        self.bn = nn.BatchNorm2d(32)
        self.act = nn.ReLU6()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.how = how

    def forward(self, x):
        y = self.act(self.bn(self.conv(x)))
        if self.how == "method":
            return y.mean(axis=(2, 3))
        if self.how == "np.mean":
            return np.mean(y, axis=(-2, -1))
        if self.how == "module":
            return self.pool(y)
        return F.adaptive_avg_pool2d(y, (1, 1))


@pytest.mark.parametrize("how", ["method", "np.mean", "module", "functional"])
def test_conv_global_avgpool(rng, how):
    m = _stats(Head(how), rng)
    x = rng.standard_normal((3, 16, 7, 7)).astype(np.float32)
    out, rules, fused = _plan(m, x)
    assert rules["conv_global_avgpool"] == 1
    eager = _eager(m, x)
    assert out.shape == eager.shape and out.dtype == eager.dtype
    np.testing.assert_allclose(out, eager, rtol=1e-5, atol=1e-6)
    from modulekit._ext import _conv

    step = fused[0].fn  # the mean in the kernel, in spatial_mean's order: its bits
    got = out if out.ndim == 2 else out[:, :, 0, 0]
    np.testing.assert_array_equal(got, _conv.spatial_mean(
        step.with_(mean=False, keepdims=False)(x)))


def test_mean_over_other_axes_is_not_fused(rng):
    class Other(Head):
        def forward(self, x):
            return self.act(self.bn(self.conv(x))).mean(axis=(1, 2))

    _, rules, _ = _plan(_stats(Other("method"), rng),
                        rng.standard_normal((1, 16, 5, 5)).astype(np.float32))
    assert rules["conv_global_avgpool"] == 0


class IR(nn.Module):
    """MobileNetV2's inverted residual block as torchvision writes it."""

    def __init__(self, inp, oup, stride, t, act=nn.ReLU6):
        super().__init__()
        hidden = inp * t
        self.use_res = stride == 1 and inp == oup
        layers = []
        if t != 1:
            layers += [nn.Conv2d(inp, hidden, 1, bias=False), nn.BatchNorm2d(hidden), act()]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                   nn.BatchNorm2d(hidden), act(),
                   nn.Conv2d(hidden, oup, 1, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        if self.use_res:
            return x + self.conv(x)
        return self.conv(x)


class TIR(tnn.Module):
    def __init__(self, inp, oup, stride, t, act=tnn.ReLU6):
        super().__init__()
        hidden = inp * t
        self.use_res = stride == 1 and inp == oup
        layers = []
        if t != 1:
            layers += [tnn.Conv2d(inp, hidden, 1, bias=False), tnn.BatchNorm2d(hidden), act()]
        layers += [tnn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                   tnn.BatchNorm2d(hidden), act(),
                   tnn.Conv2d(hidden, oup, 1, bias=False), tnn.BatchNorm2d(oup)]
        self.conv = tnn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


@pytest.mark.parametrize("inp, oup, stride, t", [(8, 8, 1, 6), (8, 16, 2, 6), (16, 16, 1, 1),
                                                 (8, 12, 1, 3)])
@pytest.mark.parametrize("act, tact", [(nn.ReLU6, tnn.ReLU6), (nn.Hardswish, tnn.Hardswish)])
def test_depthwise_chain(isa, rng, inp, oup, stride, t, act, tact):
    m = _stats(IR(inp, oup, stride, t, act), rng)
    tm = _torch_copy(m, TIR(inp, oup, stride, t, tact))
    x = rng.standard_normal((2, inp, 13, 11)).astype(np.float32)
    out, rules, fused = _plan(m, x)
    assert rules["depthwise_chain"] == 1
    (step,) = [n for n in fused if n.meta["rule"] == "depthwise_chain"]
    n_convs = 3 if t != 1 else 2
    assert len([p for p in step.meta["modules"] if p.endswith(("0", "3", "6"))]) >= n_convs
    chain = step.fn.chain
    assert chain.residual == m.use_res
    assert chain.activations == ((act()._epilogue[0] if t != 1 else None),
                                 act()._epilogue[0], None)
    # bit for bit the three folded convolutions one after the other
    y = x if chain.expand is None else chain.expand.forward(x, chain.activations[0])
    y = chain.dw.forward(y, chain.activations[1])
    y = chain.project.forward(y, None, x if chain.residual else None)
    np.testing.assert_array_equal(out, y)
    with torch.no_grad():
        np.testing.assert_allclose(out, tm(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="Conv2d.*channels"):
        m(np.zeros((1, inp + 1, 13, 11), np.float32))


# ------------------------------------------------------------------ boundaries
def test_a_hooked_module_is_a_boundary(rng):
    m = _stats(IR(8, 8, 1, 6), rng)
    x = rng.standard_normal((1, 8, 9, 9)).astype(np.float32)
    _, rules, _ = _plan(m, x)
    assert rules["depthwise_chain"] == 1
    seen = []
    h = m.conv[4].register_forward_hook(lambda mod, i, o: seen.append(o.shape))  # the dw BN
    out, rules, fused = _plan(m, x)
    assert rules["depthwise_chain"] == 0
    assert all("conv.4" not in n.meta["modules"] for n in fused)
    assert seen  # the hook fires in the plan
    before = len(seen)
    m(x)
    assert len(seen) == before + 1
    h.remove()
    np.testing.assert_allclose(out, _eager(m, x), rtol=1e-5, atol=1e-6)
    # a hooked activation: the fold stays, the epilogue does not
    m = _stats(ConvBN(act=nn.ReLU()), rng)
    m.act.register_forward_hook(lambda mod, i, o: None)
    _, rules, _ = _plan(m, rng.standard_normal((1, 8, 5, 5)).astype(np.float32))
    assert _fired(rules) == {"conv_bn_fold": 1}


def test_a_value_read_from_outside_is_not_fused(rng):
    class Tap(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(8)
            self.relu = nn.ReLU()

        def forward(self, x):
            y = self.conv(x)  # read twice: by the norm and by the output
            z = self.bn(y)
            return self.relu(z), y

    m = _stats(Tap(), rng)
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    m.eval().compile(fullgraph=True)
    m(x)
    out = m(x)
    assert m._compiled.last.plan.graph.meta["rules"]["conv_bn_fold"] == 0
    ref = _eager(m, x)
    for a, b in zip(out, ref):
        np.testing.assert_array_equal(a, b)

    class TapNorm(Tap):
        def forward(self, x):
            z = self.bn(self.conv(x))
            return self.relu(z), z  # the norm's output read outside: no activation epilogue

    m = _stats(TapNorm(), rng)
    m.eval().compile(fullgraph=True)
    m(x)
    out = m(x)
    rules = m._compiled.last.plan.graph.meta["rules"]
    assert rules["conv_bn_fold"] == 1 and rules["conv_activation"] == 0
    np.testing.assert_array_equal(out[0], np.maximum(out[1], 0))


def test_every_conv_rule_is_in_the_pipeline_in_order():
    names = [r.__name__ for r in PIPELINE]
    assert [n for n in names if n in CONV_RULES] == list(CONV_RULES)

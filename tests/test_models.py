"""modulekit.models against the same architectures built by hand in torch (torchvision's module
names), loaded through torch.save / load_state_dict(strict=True)."""

import io

import numpy as np
import pytest

pytest.importorskip("modulekit.module")
torch = pytest.importorskip("torch")
tnn = torch.nn

from modulekit import models  # noqa: E402
from modulekit import nn as mnn  # noqa: E402


# ------------------------------------------------------------------ torch reference models
class TBasicBlock(tnn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = tnn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = tnn.BatchNorm2d(planes)
        self.relu = tnn.ReLU(inplace=True)
        self.conv2 = tnn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = tnn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class TBottleneck(tnn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = tnn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = tnn.BatchNorm2d(planes)
        self.conv2 = tnn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = tnn.BatchNorm2d(planes)
        self.conv3 = tnn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = tnn.BatchNorm2d(planes * 4)
        self.relu = tnn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


class TResNet(tnn.Module):
    def __init__(self, block, layers, num_classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = tnn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = tnn.BatchNorm2d(64)
        self.relu = tnn.ReLU(inplace=True)
        self.maxpool = tnn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], 2)
        self.layer3 = self._make_layer(block, 256, layers[2], 2)
        self.layer4 = self._make_layer(block, 512, layers[3], 2)
        self.avgpool = tnn.AdaptiveAvgPool2d((1, 1))
        self.fc = tnn.Linear(512 * block.expansion, num_classes)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = tnn.Sequential(
                tnn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                tnn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return tnn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def t_cna(inp, oup, k=3, stride=1, groups=1, act=True):
    layers = [
        tnn.Conv2d(inp, oup, k, stride, (k - 1) // 2, groups=groups, bias=False),
        tnn.BatchNorm2d(oup),
    ]
    if act:
        layers.append(tnn.ReLU6(inplace=True))
    return tnn.Sequential(*layers)


class TInvertedResidual(tnn.Module):
    def __init__(self, inp, oup, stride, expand_ratio):
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = [] if expand_ratio == 1 else [t_cna(inp, hidden, 1)]
        layers += [
            t_cna(hidden, hidden, 3, stride, hidden),
            tnn.Conv2d(hidden, oup, 1, 1, 0, bias=False),
            tnn.BatchNorm2d(oup),
        ]
        self.conv = tnn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class TMobileNetV2(tnn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        setting = [
            [1, 16, 1, 1],
            [6, 24, 2, 2],
            [6, 32, 3, 2],
            [6, 64, 4, 2],
            [6, 96, 3, 1],
            [6, 160, 3, 2],
            [6, 320, 1, 1],
        ]
        features, cin = [t_cna(3, 32, stride=2)], 32
        for t, c, n, s in setting:
            for i in range(n):
                features.append(TInvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        features.append(t_cna(cin, 1280, 1))
        self.features = tnn.Sequential(*features)
        self.classifier = tnn.Sequential(tnn.Dropout(0.2), tnn.Linear(1280, num_classes))

    def forward(self, x):
        x = tnn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


def randomize(model, seed=0):
    """torchvision-like init plus non-trivial BatchNorm statistics and affine parameters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, tnn.Conv2d):
                tnn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu", generator=g)
            elif isinstance(m, tnn.BatchNorm2d):
                n = m.num_features
                m.weight.copy_(torch.rand(n, generator=g) * 0.5 + 0.5)
                m.bias.copy_(torch.randn(n, generator=g) * 0.1)
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
                m.num_batches_tracked.fill_(7)
            elif isinstance(m, tnn.Linear):
                # outputs of order 1, so the absolute tolerance is a relative one too
                tnn.init.normal_(m.weight, 0, m.in_features**-0.5, generator=g)
                tnn.init.normal_(m.bias, 0, 0.1, generator=g)
    return model.eval()


def roundtrip(tmodel):
    buf = io.BytesIO()
    torch.save(tmodel.state_dict(), buf)
    buf.seek(0)
    return torch.load(buf)


CASES = {
    "resnet18": (lambda: TResNet(TBasicBlock, [2, 2, 2, 2]), models.resnet18, 64),
    "resnet50": (lambda: TResNet(TBottleneck, [3, 4, 6, 3]), models.resnet50, 64),
    "mobilenet_v2": (TMobileNetV2, models.mobilenet_v2, 64),
}


@pytest.mark.parametrize("name", list(CASES))
def test_model_matches_torch(name):
    tbuild, mbuild, size = CASES[name]
    torch.manual_seed(0)
    tmodel = randomize(tbuild())
    state = roundtrip(tmodel)
    model = mbuild()
    result = model.load_state_dict(state, strict=True)
    assert list(result.missing_keys) == [] and list(result.unexpected_keys) == []
    model.eval()
    x = np.random.default_rng(1).standard_normal((2, 3, size, size)).astype(np.float32)
    with torch.no_grad():
        ref = tmodel(torch.from_numpy(x)).numpy()
    y = model(x)
    assert y.shape == ref.shape == (2, 1000)
    assert np.abs(ref).max() > 0.5  # the comparison is not swamped by tiny outputs
    assert np.abs(y - ref).max() <= 1e-4, np.abs(y - ref).max()
    # initialize() (packing) keeps the outputs; the compiled plan folds every norm; a second
    # checkpoint re-folds
    model.initialize()
    assert model.state_dict().keys() <= state.keys()
    np.testing.assert_allclose(model(x), ref, rtol=0, atol=1e-4)
    convs = [m for m in model.modules() if type(m).__name__ == "Conv2d"]
    assert convs and model._compiled.last.plan.graph.meta["rules"]["conv_bn_fold"] == len(convs)
    tmodel2 = randomize(tbuild(), seed=1)
    model.load_state_dict(roundtrip(tmodel2), strict=True)
    with torch.no_grad():
        ref2 = tmodel2(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model(x), ref2, rtol=0, atol=1e-4)


def test_resnet18_train_mode_matches_torch():
    torch.manual_seed(0)
    tmodel = randomize(TResNet(TBasicBlock, [2, 2, 2, 2]))
    model = models.resnet18()
    model.load_state_dict(roundtrip(tmodel))
    model.eval().initialize()
    model(np.zeros((1, 3, 32, 32), np.float32))  # a folded plan first: train() must leave it
    tmodel.train()
    model.train()
    x = np.random.default_rng(2).standard_normal((3, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        ref = tmodel(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model(x), ref, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(
        model.bn1.running_mean.numpy(), tmodel.bn1.running_mean.numpy(), rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(
        model.layer4[1].bn2.running_var.numpy(),
        tmodel.layer4[1].bn2.running_var.numpy(),
        rtol=1e-4,
        atol=1e-5,
    )
    assert int(model.bn1.num_batches_tracked.numpy()) == 8


def test_resnet_forward_plan_and_hooks():
    """In eval mode the compiled ResNet runs its folded kernels (the stem's conv -> max pool
    as one fused call); a hooked module is a boundary of the plan and its hook fires on every
    call; removing the hook plans the fused calls again, with the same bits."""
    torch.manual_seed(0)
    tmodel = randomize(TResNet(TBasicBlock, [2, 2, 2, 2]))
    model = models.resnet18()
    model.load_state_dict(roundtrip(tmodel))
    model.eval().initialize()
    x = np.random.default_rng(3).standard_normal((1, 3, 45, 51)).astype(np.float32)
    fused = model(x)
    rules = model._compiled.last.plan.graph.meta["rules"]
    assert rules["conv_maxpool"] == 1 and rules["conv_residual_add"] == 8
    with torch.no_grad():
        ref = tmodel(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(fused, ref, rtol=0, atol=1e-4)
    seen = []
    for path in ("maxpool", "layer3.1.bn2", "fc"):
        handle = model.get_submodule(path).register_forward_hook(lambda m, i, o: seen.append(1))
        model(x)  # the capture (forward, its hook fires once)
        y = model(x)
        assert seen == [1, 1]
        seen.clear()
        if path == "layer3.1.bn2":  # its block runs the norm unfolded
            np.testing.assert_allclose(y, ref, rtol=0, atol=1e-4)
        else:  # the same kernels: the same bits
            np.testing.assert_array_equal(y, fused)
        handle.remove()
        np.testing.assert_array_equal(model(x), fused)
    with pytest.raises(ValueError, match=r"Conv2d\(3, 64.*expected input with 3 channels"):
        model(np.zeros((1, 4, 45, 51), np.float32))  # the plan's error names the layer
    model.maxpool = mnn.MaxPool2d(2, 2)  # a replaced module: re-planned for it
    tmodel.maxpool = tnn.MaxPool2d(2, 2)
    with torch.no_grad():
        ref = tmodel(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model(x), ref, rtol=0, atol=1e-4)
    model.layer2[1].relu = mnn.ReLU6()  # not what torch's block has: compare to the modules
    tmodel.layer2[1].relu = tnn.ReLU6()
    with torch.no_grad():
        ref = tmodel(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model(x), ref, rtol=0, atol=1e-4)
    assert model._compiled.last.plan.graph.meta["rules"]["conv_residual_add"] == 8


def test_sequential_conv_bn_relu_maxpool_fused():
    tseq = tnn.Sequential(tnn.Conv2d(3, 20, 5, 2, 2), tnn.BatchNorm2d(20), tnn.ReLU(),
                          tnn.MaxPool2d(3, 2, 1), tnn.Conv2d(20, 9, 3), tnn.MaxPool2d(2))
    randomize(tseq)
    tseq.eval()
    seq = mnn.Sequential(mnn.Conv2d(3, 20, 5, 2, 2), mnn.BatchNorm2d(20), mnn.ReLU(),
                         mnn.MaxPool2d(3, 2, 1), mnn.Conv2d(20, 9, 3), mnn.MaxPool2d(2))
    seq.load_state_dict(roundtrip(tseq))
    seq.eval().initialize()
    steps = seq._fused_plan[1]
    assert [len(s) for s in steps] == [4, 2]  # conv+bn+relu+pool, conv+pool
    x = np.random.default_rng(4).standard_normal((2, 3, 33, 29)).astype(np.float32)
    with torch.no_grad():
        ref = tseq(torch.from_numpy(x)).numpy()
    y = seq(x)
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-4)
    seen = []
    seq[3].register_forward_hook(lambda m, i, o: seen.append(1))
    # a hooked step runs module by module (the norm unfolded: rounding differs a little)
    np.testing.assert_allclose(seq(x), y, rtol=0, atol=1e-5)
    assert seen == [1]
    seq.train()
    tseq.train()
    with torch.no_grad():
        ref = tseq(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(seq(x), ref, rtol=1e-4, atol=1e-4)


HOOK_CASES = {
    "resnet18": ["conv1", "relu", "layer1.0.conv1", "layer1.0.bn2", "layer1.1.relu",
                 "layer2.0.downsample", "layer3.0.downsample.1"],
    "resnet50": ["layer1.0.conv2", "layer1.0.relu", "layer2.0.downsample.0", "layer4.2.bn3"],
    "mobilenet_v2": ["features.0.0", "features.0.2", "features.1.conv", "features.2.conv.0.2",
                     "features.4.conv.2", "features.18.1", "classifier.1"],
}


@pytest.mark.parametrize("name", list(CASES))
def test_model_hooks_see_every_call_as_torch(name):
    """A forward hook on any module inside a model (a convolution or norm folded into a fused
    block, an activation run as a kernel epilogue, a downsample Sequential) fires as often as
    on torch's module of the same name, and what it returns replaces the module's output."""
    tbuild, mbuild, _ = CASES[name]
    torch.manual_seed(0)
    tmodel = randomize(tbuild())
    model = mbuild()
    model.load_state_dict(roundtrip(tmodel))
    model.eval().initialize()
    x = np.random.default_rng(4).standard_normal((1, 3, 32, 32)).astype(np.float32)
    fused = model(x)

    def count_all(root, counts):
        handles = []
        for path, m in root.named_modules():
            counts[path] = 0

            def hook(m, i, o, path=path):
                counts[path] += 1

            handles.append(m.register_forward_hook(hook))
        return handles

    tcounts, mcounts = {}, {}
    th, mh = count_all(tmodel, tcounts), count_all(model, mcounts)
    with torch.no_grad():
        ref = tmodel(torch.from_numpy(x)).numpy()
    hooked = model(x)
    assert {k: v for k, v in mcounts.items() if v} == {k: v for k, v in tcounts.items() if v}
    np.testing.assert_allclose(hooked, ref, rtol=0, atol=1e-4)
    np.testing.assert_allclose(fused, ref, rtol=0, atol=1e-4)
    for h in th + mh:
        h.remove()

    # a hook that changes what a module returns (a module the fused paths run as a kernel):
    # its parent's output follows, as in torch
    def parent_output(root, path, mutate):
        module = root.get_submodule(path)
        parent = root.get_submodule(path.rpartition(".")[0])
        seen = []
        handles = [parent.register_forward_hook(
            lambda m, i, o: seen.append(o.numpy() if torch.is_tensor(o) else o))]
        if mutate:
            handles.append(module.register_forward_hook(lambda m, i, o: o * 0.5))
        if root is tmodel:
            with torch.no_grad():
                tmodel(torch.from_numpy(x))
        else:
            model(x)
        for h in handles:
            h.remove()
        return seen[0]

    for path in HOOK_CASES[name]:
        plain = parent_output(model, path, False)
        got, ref = parent_output(model, path, True), parent_output(tmodel, path, True)
        assert np.abs(got - plain).max() > 1e-3, path  # the hook does change the result
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4, err_msg=path)
    np.testing.assert_array_equal(model(x), fused)  # hooks removed: the fused path again


def _resnet_layers(model, x):
    """ResNet run as its modules, one by one (its forward, not its compiled plan)."""
    return model.forward(x)


def _close(a, b):
    """The plan (norms folded) against the layers run one by one."""
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def _double(m, a, o):
    return o * 2


def _bn(c, seed):
    bn = mnn.BatchNorm2d(c)
    r = np.random.default_rng(seed)
    bn.load_state_dict({
        "running_mean": r.standard_normal(c).astype(np.float32) * 0.1,
        "running_var": r.random(c).astype(np.float32) + 0.5,
        "weight": r.random(c).astype(np.float32) + 0.5,
        "bias": r.standard_normal(c).astype(np.float32) * 0.1,
    }, strict=False)
    return bn.eval()


RESNET_MUTATIONS = {
    # name: (mutation, whether the output must change)
    "replace a block": (lambda m: m.layer2.__setitem__(1, mnn.Identity()), True),
    "delete a block": (lambda m: m.layer3.__delitem__(1), True),
    "hook on a block": (lambda m: m.layer2[0].register_forward_hook(_double), True),
    "hook inside a block": (lambda m: m.layer2[0].conv2.register_forward_hook(_double), True),
    "hook on a downsample conv": (
        lambda m: m.layer3[0].downsample[0].register_forward_hook(_double), True),
    "pre-hook on a stage": (
        lambda m: m.layer3.register_forward_pre_hook(lambda mod, a: (a[0] * 0.5,)), True),
    "hook on the stem's norm": (lambda m: m.bn1.register_forward_hook(_double), True),
    "hook on fc": (lambda m: m.fc.register_forward_hook(_double), True),
    "norm replaced": (lambda m: setattr(m.layer2[0], "bn1", _bn(128, 1)), True),
    "norm statistics replaced": (
        lambda m: setattr(m.layer1[1].bn2, "running_var", _bn(64, 2).running_var), True),
    "norm without statistics": (lambda m: setattr(m.layer1[0].bn1, "running_mean", None), True),
    "activation replaced": (lambda m: setattr(m.layer4[1], "relu", mnn.SiLU()), True),
    "stem pool replaced": (lambda m: setattr(m, "maxpool", mnn.MaxPool2d(2, 2)), True),
    "reload": (lambda m: m.load_state_dict(
        roundtrip(randomize(TResNet(TBasicBlock, [2, 2, 2, 2]), seed=5))), True),
    "new fc": (lambda m: setattr(m, "fc", mnn.Linear(512, 10)), True),
    "block in train mode": (lambda m: m.layer2[0].train(), True),
    "initialize again": (lambda m: m.initialize(), False),
}


@pytest.mark.parametrize("name", sorted(RESNET_MUTATIONS))
def test_resnet_plan_follows_mutations(name):
    """ResNet's compiled plan is reused while nothing changes, and every change that alters
    what the model computes is seen by the next call: the output is the modules' run one by
    one (to float32 rounding: the plan folds the norms)."""
    from modulekit import module as mod

    torch.manual_seed(0)
    model = models.resnet18()
    model.load_state_dict(roundtrip(randomize(TResNet(TBasicBlock, [2, 2, 2, 2]))))
    model.eval().initialize()
    x = np.random.default_rng(6).standard_normal((1, 3, 40, 48)).astype(np.float32)
    before = model(x)
    captures = model._compiled.captures
    epoch = mod.structure_epoch()
    np.testing.assert_array_equal(model(x), before)
    assert model._compiled.captures == captures and mod.structure_epoch() == epoch
    _close(_resnet_layers(model, x), before)
    mutate, changes = RESNET_MUTATIONS[name]
    mutate(model)
    after = model(x)
    if "train" in name:  # batch statistics: nothing folded for that block
        assert not np.array_equal(after, before)
        return
    _close(after, _resnet_layers(model, x))
    same = after.shape == before.shape and np.allclose(after, before, rtol=1e-5, atol=1e-6)
    assert same != changes
    # the capturing call returns the plan's bits unless a module inside has hooks or is in
    # training mode (a replay would fire them twice or update statistics twice): then the
    # eager result, to float32 rounding of the plan's
    replayed = not any(m.training or (m._has_hooks and m is not model) for m in model.modules())
    (np.testing.assert_array_equal if replayed else _close)(model(x), after)

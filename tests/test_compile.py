"""Module.compile(): capture, guards, eager fallback, hooks, plans, graph/code."""

import warnings

import numpy as np
import pytest
import user_models as um

import modulekit as mk
from modulekit import models, nn
from modulekit.compile import CompileError, CompileWarning
from modulekit.nn import functional as F


def _eval_init(m):
    return m.eval().initialize()


def _calls(m, *args, n=3):
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        return [m(*args) for _ in range(n)]


def _same(a, b):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert type(a) is type(b)
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype


def _close(a, b, rtol=1e-5, atol=1e-6):
    """Compiled vs eager where a rule is not bit-identical (the defaults: a BatchNorm folded
    into its convolution, one rounding fewer, equal to float32 rounding); tuples element-wise."""
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y, rtol, atol)
    else:
        assert type(a) is type(b) and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def _bn_stats(model, seed=0):
    rng = np.random.default_rng(seed)
    state = {}
    for name, buf in model.named_buffers():
        if name.endswith("running_mean"):
            state[name] = rng.standard_normal(buf.shape).astype(np.float32) * 0.1
        elif name.endswith("running_var"):
            state[name] = rng.random(buf.shape).astype(np.float32) + 0.5
    model.load_state_dict(state, strict=False)
    return model


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        y = (y * 0.5 + 1.0).mean(axis=(2, 3))
        y = np.concatenate([y, y[:, :2]], axis=1)[:, :8]
        return self.fc(y.reshape(x.shape[0], -1))


X = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)


def test_compile_matches_eager_and_plans_once():
    m = _eval_init(Small())
    ref = m(X)
    assert m.compile() is None
    outs = _calls(m, X)
    for o in outs:  # the plan (the capture call too): Conv2d + BatchNorm2d + ReLU folded
        _close(o, ref)
        _same(o, outs[0])
    assert m._compiled.captures == 1
    assert m._compiled.last.plan is not None


def test_batch_size_is_symbolic():
    m = _eval_init(Small())
    m.compile()
    m(X)
    for b in (1, 5, 2, 7):
        x = np.random.default_rng(b).standard_normal((b, 3, 8, 8)).astype(np.float32)
        m.compile(disable=True)
        ref = m(x)
        m.compile()
        m(X)
        before = m._compiled.captures
        _close(m(x), ref)
        assert m._compiled.captures == before
    assert "?" in m.graph.splitlines()[0]


def test_new_dtype_or_ndim_captures_again():
    m = _eval_init(Small())
    m.compile()
    m(X)
    m(X.astype(np.float64))
    assert m._compiled.captures == 2
    m(X.astype(np.float64))
    assert m._compiled.captures == 2


def test_specialised_shape_guard():
    class Spec(nn.Module):
        def forward(self, x):
            return x * np.ones(x.shape[0], np.float32)[:, None]

    m = Spec()
    m.compile()
    a = np.ones((3, 4), np.float32)
    _same(m(a), a.copy())
    m(a)
    b = np.ones((5, 4), np.float32)
    _same(m(b), b.copy())  # a new shape: captured again, not a wrong broadcast
    assert m._compiled.captures == 2


def test_lru_bound():
    class Add(nn.Module):
        def forward(self, x, k):
            return x + k

    m = Add()
    m.compile(cache_size_limit=2)
    x = np.ones(3, np.float32)
    for k in (1, 2, 3):
        m(x, k)
        m(x, k)
    assert len(m._compiled.cache) == 2 and m._compiled.captures == 3
    _same(m(x, 1), x + 1)  # dropped, captured again
    assert m._compiled.captures == 4


@pytest.mark.parametrize("how", ["bool", "float", "item", "tolist", "iter", "kernel"])
def test_value_branch_runs_eagerly_with_warning(how):
    class Branch(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            y = self.fc(x)
            if how == "bool":
                return y * 2 if (y.sum() > 0) else y - 1
            if how == "float":
                return y * float(y.max())
            if how == "item":
                return y + y.mean().item()
            if how == "tolist":
                return y + len(y.tolist())
            if how == "iter":
                return np.stack([r * 2 for r in y])
            return mk.matmul(y, np.eye(4, dtype=np.float32))

    m = Branch()
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    ref = m(x)
    m.compile()
    with pytest.warns(CompileWarning, match=r"test_compile\.py:\d+"):
        out = m(x)
    _same(out, ref)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        _same(m(x), ref)  # eager for this signature, no second capture
    with pytest.raises(AttributeError, match="could not be captured"):
        _ = m.graph
    m.compile(fullgraph=True)
    with pytest.raises(CompileError, match=r"test_compile\.py:\d+"):
        m(x)


def test_hooks_fire_and_hooked_module_is_a_boundary():
    m = _eval_init(Small())
    seen, pre = [], []
    m.bn.register_forward_hook(lambda mod, args, out: seen.append(out.copy()))
    m.register_forward_pre_hook(lambda mod, args: pre.append(1))
    ref = m(X)
    n_seen = len(seen)
    m.compile()
    outs = _calls(m, X)
    for o in outs:
        _same(o, ref)
    assert len(seen) == n_seen + 3 and len(pre) == 4
    np.testing.assert_array_equal(seen[-1], seen[0])
    node = [n for n in m._compiled.current_graph().nodes if n.target == "bn"][0]
    assert node.meta["hooks"]


def test_hook_that_changes_output_and_hook_removal():
    m = _eval_init(Small())
    m.compile()
    base = m(X)
    h = m.fc.register_forward_hook(lambda mod, a, out: out * 0)
    _same(m(X), np.zeros_like(base))
    _same(m(X), np.zeros_like(base))
    h.remove()
    _same(m(X), base)


def test_structure_changes_invalidate():
    m = _eval_init(Small())
    m.compile()
    m(X)
    m(X)
    m.fc = nn.Linear(8, 5)
    out = m(X)
    assert m._compiled.captures == 2
    _same(out, m.fc(_pre_fc(m, X)))


def _pre_fc(m, x):
    y = F.relu(m.bn(m.conv(x)))
    y = (y * 0.5 + 1.0).mean(axis=(2, 3))
    return np.concatenate([y, y[:, :2]], axis=1)[:, :8]


def test_load_cast_and_train_invalidate():
    m = _eval_init(Small())
    m.compile()
    m(X)
    state = {k: np.asarray(v) * 2 for k, v in Small().state_dict().items()}
    m.load_state_dict(state)
    eager = Small()
    eager.load_state_dict(state)
    eager.eval()
    _close(m(X), eager(X))
    m.to(mk.float64)
    eager.to(mk.float64)
    _close(m(X), eager(X))
    m.train()
    eager.train()
    np.testing.assert_allclose(m(X), eager(X), rtol=1e-12)


def test_code_is_valid_python_and_runs():
    m = _eval_init(Small())
    m.compile()
    m(X)
    ref = m(X)  # the plan's result
    code, constants = m.code_with_constants
    assert code == m.code
    scope = dict(constants)
    exec(compile(code, "<test>", "exec"), scope)
    _same(scope["forward"](X), ref)
    text = m.graph
    assert "call_module[conv]" in text and "float32[2, 8, 8, 8]" in text
    assert "scope:" not in text
    inlined = m.inlined_graph
    assert "numpy.concatenate" in inlined


def test_scopes_kept_for_user_modules():
    m = _eval_init(um.ResNet(num_classes=10))
    m.compile()
    m(np.zeros((1, 3, 32, 32), np.float32))
    assert "scope: layer1.0" in m.inlined_graph
    assert "kernel_layer1_0_conv1" in m.code


def test_uncompiled_refusals():
    m = Small()
    for name in ("graph", "inlined_graph", "code", "code_with_constants"):
        with pytest.raises(AttributeError, match="compile"):
            getattr(m, name)
    with pytest.raises(NotImplementedError, match="compiled"):
        m.save("x")
    m.compile()
    with pytest.raises(AttributeError, match="call it once"):
        _ = m.graph
    with pytest.raises(TypeError, match="unknown option"):
        m.compile(nope=1)


def test_unsupported_argument_runs_eagerly():
    m = _eval_init(Small())
    m.compile()
    ref = m(X)
    with pytest.warns(CompileWarning, match="Tensor"):
        _close(m(mk.Tensor(X)), ref)  # eager: the norm not folded


def test_sequential_is_captured_layer_by_layer_and_planned():
    seq = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.SiLU(),
                        nn.Linear(16, 4)).initialize()
    x = np.random.default_rng(3).standard_normal((5, 8)).astype(np.float32)
    ref = seq(x)
    seq.compile()
    for o in _calls(seq, x):
        np.testing.assert_allclose(o, ref, rtol=1e-5, atol=1e-6)
    assert seq.graph.count("call_module[") == 5  # captured as written
    assert "kernel_0(" in seq.code  # the planner fused Linear + ReLU


def test_inplace_and_setitem():
    class InPlace(nn.Module):
        def forward(self, x):
            y = x * 1.0
            y[:, 0] = 0.0
            y += x
            y[y < 0] = -1.0
            return y.T.copy()

    m = InPlace()
    x = np.random.default_rng(4).standard_normal((3, 4))
    ref = m(x)
    m.compile()
    for o in _calls(m, x):
        _same(o, ref)


# ------------------------------------------------------------------ the three user models
@pytest.mark.parametrize("build, builtin", [(um.ResNet, models.resnet18),
                                            (um.MobileNetV2, models.mobilenet_v2)])
@pytest.mark.parametrize("batch", [1, 3])
def test_user_cnn_gets_the_builtin_plan(build, builtin, batch):
    """A user's torchvision-style ResNet/MobileNetV2, compiled, runs the same plan as the
    built-in model (bit for bit), close to its own eager run (the folded norms)."""
    m = _eval_init(_bn_stats(build(num_classes=10)))
    x = np.random.default_rng(batch).standard_normal((batch, 3, 64, 64)).astype(np.float32)
    ref = m(x)
    m.compile()
    outs = _calls(m, x)
    for o in outs:  # the capture call returns the plan's result too
        _close(o, ref)
        _same(o, outs[0])
    assert m._compiled.last.plan is not None
    _same(_exec_code(m, x), outs[1])
    b = builtin(num_classes=10)
    b.load_state_dict(m.state_dict(include_packed=True))
    b = _eval_init(b)
    b(x)
    _same(b(x), outs[1])
    rules = m._compiled.last.plan.graph.meta["rules"]
    assert rules == b._compiled.last.plan.graph.meta["rules"]
    assert rules["conv_bn_fold"] == (20 if build is um.ResNet else 52)
    assert rules["depthwise_chain"] == (0 if build is um.ResNet else 17)


def _exec_code(m, *args):
    code, constants = m.code_with_constants
    scope = dict(constants)
    exec(compile(code, "<plan>", "exec"), scope)
    return scope["forward"](*args)


def _bert():
    m = um.BertModel(um.BERT_CONFIG)
    rng = np.random.default_rng(0)
    m.load_state_dict({k: rng.standard_normal(v.shape).astype(np.float32) * 0.05
                       for k, v in m.state_dict().items()})
    return _eval_init(m)


def _bert_inputs(b, seq):
    rng = np.random.default_rng(b * 100 + seq)
    ids = rng.integers(0, 1000, (b, seq))
    mask = np.ones((b, seq), np.int64)
    mask[0, seq - 2:] = 0
    return ids, mask


@pytest.mark.parametrize("b, seq", [(1, 16), (4, 9)])
def test_user_bert_matches_eager(b, seq):
    # the planner fuses attention (ATTENTION_RTOL/ATOL): the plan matches eager within
    # those tolerances, not bit for bit;
    # the printed code computes the plan's bits
    m = _bert()
    ids, mask = _bert_inputs(b, seq)
    ref = m(ids, mask)
    m.compile()
    outs = _calls(m, ids, mask)
    for o in outs:  # (the first call captures: it is the eager call)
        _close(o, ref, rtol=1e-4, atol=1e-5)
    _same(outs[1], outs[2])
    assert m._compiled.last.plan.graph.meta["rules"]["attention"] == 2
    _same(_exec_code(m, ids, mask), outs[-1])


def test_user_models_match_torch():
    torch = pytest.importorskip("torch")
    from test_models import TBasicBlock, TMobileNetV2, TResNet, randomize

    for tbuild, mbuild in ((lambda: TResNet(TBasicBlock, [2, 2, 2, 2], 10), um.ResNet),
                           (lambda: TMobileNetV2(10), um.MobileNetV2)):
        t = randomize(tbuild())
        m = mbuild(num_classes=10)
        m.load_state_dict({k: v.numpy() for k, v in t.state_dict().items()})
        m = _eval_init(m)
        m.compile()
        x = np.random.default_rng(5).standard_normal((2, 3, 64, 64)).astype(np.float32)
        m(x)
        with torch.no_grad():
            expected = t(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(m(x), expected, atol=1e-4, rtol=0)


def test_user_bert_matches_transformers():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(**um.BERT_CONFIG, hidden_act="gelu",
                                  attn_implementation="eager")
    torch.manual_seed(0)
    t = transformers.BertModel(cfg).eval()
    m = um.BertModel(um.BERT_CONFIG)
    state = {k: v.numpy() for k, v in t.state_dict().items() if "position_ids" not in k}
    m.load_state_dict(state)
    m = _eval_init(m)
    m.compile()
    ids, mask = _bert_inputs(2, 12)
    m(ids, mask)
    hidden, pooled = m(ids, mask)
    with torch.no_grad():
        out = t(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    np.testing.assert_allclose(hidden, out.last_hidden_state.numpy(), atol=1e-4, rtol=0)
    np.testing.assert_allclose(pooled, out.pooler_output.numpy(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_builtin_models_compile_by_default(name):
    m = _eval_init(_bn_stats(getattr(models, name)(num_classes=10)))
    assert m._compiled is not None
    x = np.random.default_rng(6).standard_normal((1, 3, 64, 64)).astype(np.float32)
    outs = _calls(m, x)
    assert m._compiled.captures == 1 and m._compiled.last.plan is not None
    m.compile(disable=True)
    ref = m(x)  # the layers one by one
    for o in outs:
        _close(o, ref)
        _same(o, outs[0])
    import pickle

    twin = pickle.loads(pickle.dumps(m))  # an unpickled built-in model compiles again
    assert twin._compiled is not None
    _same(twin(x), outs[0])


def test_concurrent_calls_of_a_compiled_module():
    import threading

    m = _eval_init(um.ResNet(num_classes=10))
    xs = [np.random.default_rng(i).standard_normal((1 + i % 2, 3, 32, 32)).astype(np.float32)
          for i in range(6)]
    refs = [m(x) for x in xs]
    m.compile()
    errors, outs = [], {}

    def work(i):
        try:
            for _ in range(3):
                outs[i] = m(xs[i])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, ref in enumerate(refs):
        _close(outs[i], ref)


def test_rank_changing_squeeze_specialises():
    class Sq(nn.Module):
        def forward(self, x):
            y = x.squeeze()
            return y.sum(axis=0) if y.ndim == 1 else y.sum(axis=1)

    m = Sq()
    m.compile()
    a, b = np.ones((1, 3)), np.ones((2, 3))
    _same(m(a), np.float64(3.0))
    _same(m(b), np.full(2, 3.0))


def test_pickled_copy_is_not_compiled():
    import copy
    import pickle

    m = _eval_init(Small())
    m.compile()
    ref = m(X)
    for c in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert c._compiled is None
        _close(c(X), ref)  # eager: the norm not folded
    assert m._compiled is not None


def test_first_call_on_an_unpacked_model_plans_once():
    m = Small().eval()  # nothing packed yet
    ref = Small().eval()
    ref.load_state_dict(m.state_dict())
    expected = ref(X)
    m.compile()
    outs = _calls(m, X)
    for o in outs:
        _close(o, expected)
        _same(o, outs[0])
    assert m._compiled.captures == 1

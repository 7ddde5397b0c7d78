"""``Module.initialize()`` and ``initialize(example)``: the first call after it builds nothing
(issue #15 item 7). No timing here: ``bench/first_call.py`` measures the first call."""

import numpy as np
import pytest

import modulekit as mk
from modulekit import nn
from modulekit.models import BertModel, mobilenet_v2, resnet18

BERT = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64, type_vocab_size=2)


def conv_kernels(model):
    """Every packed convolution object reachable from the model: its Conv2d layers' own and
    those of its compiled plans' steps (the Conv+BN folded ones), with the Winograd bytes
    each holds."""
    kernels = [m._packed for m in model.modules() if isinstance(m, nn.Conv2d)]
    compiled = model.__dict__.get("_compiled")
    for entry in (compiled.cache.values() if compiled is not None else ()):
        for node in entry.plan.graph.nodes if entry.plan is not None else ():
            if node.op != "call_fused":
                continue
            step = node.fn
            if hasattr(step, "packed"):
                kernels.append(step.packed)
            elif hasattr(step, "chain"):
                kernels += [step.chain.expand, step.chain.dw, step.chain.project]
    return {id(k): (k, k.winograd_nbytes) for k in kernels if k is not None}


def test_initialize_example_builds_the_winograd_weights_the_first_call_uses():
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64), dtype=np.float32)
    lazy = resnet18().eval()
    model = resnet18().eval()
    model.load_state_dict(lazy.state_dict())
    assert model.initialize(x) is model
    before = conv_kernels(model)
    assert sum(n for _, n in before.values()) > 0, "no layer chose Winograd at 64x64"
    y = model(x)
    after = conv_kernels(model)
    assert after.keys() == before.keys()  # no kernel object built on the first call
    assert {k: n for k, (_, n) in after.items()} == {k: n for k, (_, n) in before.items()}
    np.testing.assert_array_equal(y, lazy(x))  # same bits as the lazily prepared model


def test_initialize_without_example_leaves_shape_dependent_work_to_the_first_call():
    x = np.random.default_rng(1).standard_normal((1, 3, 64, 64), dtype=np.float32)
    model = resnet18().eval().initialize()
    kernels = conv_kernels(model)
    assert all(m._packed is not None for m in model.modules() if isinstance(m, nn.Conv2d))
    assert model._compiled.captures == 0  # the plan (folding) needs an input too
    assert sum(n for _, n in kernels.values()) == 0  # Winograd needs the input's shape
    model(x)
    assert sum(n for _, n in conv_kernels(model).values()) > 0


def test_initialize_example_mobilenet_first_call_builds_nothing():
    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32), dtype=np.float32)
    model = mobilenet_v2().eval().initialize(x)
    before = {k: n for k, (_, n) in conv_kernels(model).items()}
    model(x)
    assert {k: n for k, (_, n) in conv_kernels(model).items()} == before


def test_initialize_stacks_bert_qkv_without_an_input():
    model = BertModel(BERT).eval()
    attn = [m for m in model.modules() if type(m).__name__ == "BertSelfAttention"]
    assert attn and all(a.query._packed is None for a in attn)
    model.initialize()  # captures the compiled encoder on a one-token example
    stacked = [a.query._packed.fused for a in attn]
    assert all(a.key._packed.fused is s and a.value._packed.fused is s
               for a, s in zip(attn, stacked))
    ids = np.arange(10).reshape(1, 10)
    model(ids)
    assert [a.query._packed.fused for a in attn] == stacked  # the same objects: not rebuilt


def test_initialize_example_takes_positional_and_keyword_inputs_like_forward():
    model = BertModel(BERT).eval()
    ids = np.arange(12).reshape(2, 6) % 100
    mask = np.ones((2, 6), np.int64)
    mask[1, 4:] = 0
    ref = BertModel(BERT).eval()
    ref.load_state_dict(model.state_dict())
    ref.encoder.compile(disable=True)  # the eager modules
    assert model.initialize(ids, attention_mask=mask) is model
    captures = model.encoder._compiled.captures
    out = model(ids, attention_mask=mask)
    assert model.encoder._compiled.captures == captures  # the plan the example captured
    # (the plan's attention kernel and GELU epilogue: within their documented tolerance)
    np.testing.assert_allclose(out.last_hidden_state,
                               ref(ids, attention_mask=mask).last_hidden_state,
                               rtol=1e-4, atol=1e-5)


class Net(mk.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.head = nn.Linear(8, 2)

    def forward(self, x, scale=1.0):
        return self.head(self.body(x).mean(axis=(2, 3))) * scale


def test_initialize_example_does_not_call_hooks_but_later_calls_do():
    net = Net().eval()
    seen = []
    net.register_forward_pre_hook(lambda m, args: seen.append("pre"))
    net.body[0].register_forward_hook(lambda m, args, out: seen.append("conv"))
    net.head.register_forward_hook(lambda m, args, kwargs, out: seen.append("head"),
                                   with_kwargs=True)
    x = np.ones((1, 3, 8, 8), np.float32)
    net.initialize(x, scale=2.0)
    assert seen == []
    y = net(x, scale=2.0)
    assert seen == ["pre", "conv", "head"]
    np.testing.assert_allclose(y, 2.0 * net(x), rtol=1e-6)


def test_initialize_example_failure_propagates_and_hooks_come_back():
    net = Net().eval()
    seen = []
    net.register_forward_hook(lambda m, args, out: seen.append(1))
    with pytest.raises(ValueError):
        net.initialize(np.ones((1, 5, 8, 8), np.float32))  # 5 channels for a 3-channel conv
    assert seen == []
    net(np.ones((1, 3, 8, 8), np.float32))
    assert seen == [1]  # the warm-up's hook switch did not stay on


def test_initialize_example_respects_training_mode():
    net = Net()  # training mode: BatchNorm updates its running statistics on a call
    before = net.body[1].running_mean.numpy().copy()
    net.initialize(np.random.default_rng(3).standard_normal((2, 3, 4, 4), dtype=np.float32))
    assert not np.array_equal(net.body[1].running_mean.numpy(), before)

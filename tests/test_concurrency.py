"""Forwards racing changes of module state (the state guard, modulekit/_ext/_guard.pyx).

Reader threads run forwards of a model while a writer thread loops ``to(float16)``,
``to(float32)`` and ``load_state_dict`` of two weight sets: every output must be one of the
answers of the states the writer goes through (computed beforehand by replaying its steps on
one thread), and nothing may raise.
"""

import multiprocessing
import os
import threading
import time

import numpy as np
import pytest

import modulekit as mk
from modulekit import models, nn
from modulekit._ext import _guard
from modulekit.models.bert import BertConfig, BertModel
from modulekit.nn._random import manual_seed

RUN_S = 1.5  # how long each race runs

BERT_SMALL = dict(
    vocab_size=99, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
    intermediate_size=128, max_position_embeddings=130, type_vocab_size=2,
)


def _weights(model, seed):
    """A second weight set for ``model``: its state dict with every float value perturbed."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, v in model.state_dict().items():
        a = np.array(v.numpy())
        if a.dtype.kind == "f":
            a = (a + rng.standard_normal(a.shape) * 0.05 * (np.abs(a).mean() + 0.01)).astype(
                a.dtype
            )
        out[k] = a
    return out


def _state_arrays(model):
    return {k: np.array(v.numpy()) for k, v in model.state_dict().items()}


def _outputs(out):
    """A model's output as a tuple of float64 arrays (BERT returns a named tuple)."""
    parts = out if isinstance(out, tuple) else (out,)
    return tuple(np.asarray(p, dtype=np.float64) for p in parts if p is not None)


def _steps(model, weights_a, weights_b):
    """The writer's cycle: the state after each step is one the readers may see."""
    return [
        lambda: model.load_state_dict(weights_a),
        lambda: model.to(mk.float16),
        lambda: model.to(mk.float32),
        lambda: model.load_state_dict(weights_b),
        lambda: model.to(mk.float16),
        lambda: model.to(mk.float32),
    ]


def _same(got, want, tol=None):
    if len(got) != len(want):
        return False
    if tol is None:
        return all(np.array_equal(g, w) for g, w in zip(got, want))
    return all(g.shape == w.shape and np.allclose(g, w, **tol) for g, w in zip(got, want))


def _race(model, calls, weights_b, n_readers=3, weights_a=None, tol=None):
    """Run ``calls`` (name -> (callable, input)) in reader threads while a writer cycles
    through :func:`_steps`; check every output against the replayed answers (bit for bit, or
    within ``tol`` where a compiled part's eager and planned results differ: a call made while
    another thread captures runs eagerly; float16 weights or a mix of states lie far outside)."""
    if weights_a is None:
        weights_a = _state_arrays(model)
    # the answers: replay the writer's cycle once on this thread
    answers = {name: [] for name in calls}

    def record():
        # twice: a compiled part's first call after a change captures (the eager result),
        # the next runs its plan, whose attention kernel is not bit-identical to eager
        for _ in range(2):
            for name, (fn, x) in calls.items():
                got = _outputs(fn(x))
                if not any(_same(got, a) for a in answers[name]):
                    answers[name].append(got)

    record()
    for step in _steps(model, weights_a, weights_b):
        step()
        record()
    for name, outs in answers.items():  # the states differ: a mix could not pass unseen
        assert len(outs) >= 3, name
    model.load_state_dict(weights_a)

    stop = threading.Event()
    errors, bad, counts = [], [], []
    cycles = [0]

    def reader(name, fn, x):
        n = 0
        try:
            while not stop.is_set():
                got = _outputs(fn(x))
                if not any(_same(got, a, tol) for a in answers[name]):
                    bad.append(name)
                n += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))
        counts.append(n)

    def writer():
        try:
            steps = _steps(model, weights_a, weights_b)
            while not stop.is_set():
                for step in steps:
                    step()
                cycles[0] += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    threads = [
        threading.Thread(target=reader, args=(name, fn, x))
        for _ in range(n_readers)
        for name, (fn, x) in calls.items()
    ]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    time.sleep(RUN_S)
    stop.set()
    for t in threads:
        t.join(60)
        assert not t.is_alive()
    assert errors == []
    assert bad == []
    assert cycles[0] >= 1 and min(counts) >= 1
    assert _guard.state() == (0, 0, False)


def test_mlp_forward_races_to_and_load_state_dict():
    manual_seed(0)
    mlp = nn.Sequential(
        nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.GELU(), nn.LayerNorm(64),
        nn.Linear(64, 10),
    ).eval()
    weights_b = _weights(mlp, 1)
    x = np.random.default_rng(2).standard_normal((4, 32)).astype(np.float32)
    # the whole model, and its first layer called on its own while its parent changes
    _race(mlp, {"mlp": (mlp, x), "first": (mlp[0], x)}, weights_b)


def test_fused_mlp_chain_races_to():
    manual_seed(0)
    mlp = nn.Sequential(
        nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8)
    ).eval()
    weights_a, weights_b = _state_arrays(mlp), _weights(mlp, 1)
    mlp.initialize()  # one kernel chain: Sequential.__call__'s shortcut (packed weights)
    x = np.random.default_rng(2).standard_normal((1, 16)).astype(np.float32)
    _race(mlp, {"mlp": (mlp, x)}, weights_b, weights_a=weights_a)


def test_resnet18_stage_races_to_and_load_state_dict():
    # ResNet-18's first stage (its first forward after each change re-folds and re-packs
    # the convolutions, which takes seconds for the whole network): the stage and its first
    # block called on their own while the stage changes
    manual_seed(0)
    stage = models.resnet18(num_classes=10).eval().layer1
    weights_b = _weights(stage, 1)
    x = np.random.default_rng(2).standard_normal((1, 64, 8, 8)).astype(np.float32)
    _race(stage, {"layer1": (stage, x), "block": (stage[0], x)}, weights_b, n_readers=2)


def test_bert_small_forward_races_to_and_load_state_dict():
    manual_seed(0)
    bert = BertModel(BertConfig(**BERT_SMALL)).eval()
    weights_b = _weights(bert, 1)
    ids = np.random.default_rng(2).integers(0, 99, size=(2, 12))
    # the attention kernel against the eager steps (api.md, "Transformer rules")
    _race(bert, {"bert": (bert, ids)}, weights_b, tol=dict(rtol=1e-4, atol=1e-5))


def test_forwards_run_in_parallel():
    # two forwards must be inside the model at the same time: a barrier both wait at
    barrier = threading.Barrier(2, timeout=30)

    class Meet(nn.Module):
        def forward(self, x):
            barrier.wait()
            return x

    model = nn.Sequential(Meet())
    results = []
    threads = [threading.Thread(target=lambda: results.append(model(1))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [1, 1]
    assert not barrier.broken


def test_writer_waits_for_a_running_forward():
    entered, release = threading.Event(), threading.Event()

    class Slow(nn.Module):
        def forward(self, x):
            entered.set()
            release.wait(30)
            return x * self.scale.numpy()

    model = Slow()
    model.register_buffer("scale", np.ones(3, np.float32))
    out = []
    reader = threading.Thread(target=lambda: out.append(model(np.ones(3, np.float32))))
    reader.start()
    assert entered.wait(30)
    writer = threading.Thread(target=lambda: model.to(mk.float16))
    writer.start()
    writer.join(0.2)
    assert writer.is_alive()  # held back by the running forward
    assert model.scale.dtype == mk.float32
    assert _guard.state()[1] == 1  # one writer waiting
    release.set()
    reader.join(30)
    writer.join(30)
    assert out[0].dtype == np.float32
    assert model.scale.dtype == mk.float16
    assert _guard.state() == (0, 0, False)


def test_to_from_inside_a_forward_hook_is_refused_clearly():
    model = nn.Sequential(nn.LayerNorm(4)).eval()
    x = np.ones((1, 4), np.float32)
    want = model(x)
    model[0].register_forward_hook(lambda m, args, out: model.to(mk.float16))
    with pytest.raises(RuntimeError, match=r"to\(\) called during a module call"):
        model(x)
    assert model[0].weight.dtype == mk.float32
    assert _guard.state() == (0, 0, False)
    lin = nn.Linear(2, 2)
    lin.register_forward_pre_hook(lambda m, a: m.load_state_dict(m.state_dict()))
    with pytest.raises(RuntimeError, match=r"load_state_dict\(\) called during a module call"):
        lin(np.ones((1, 2), np.float32))
    model[0]._forward_hooks.clear()
    model[0]._refresh_hooks_flag()
    np.testing.assert_array_equal(model(x), want)


def test_writer_may_run_forwards_and_nest_writers():
    # a load_state_dict post-hook that runs the model and casts it: the writer's own thread
    model = nn.Sequential(nn.LayerNorm(4)).eval()
    x = np.ones((1, 4), np.float32)
    seen = []

    def post(module, result):
        seen.append(module(x))
        module.to(mk.float64)

    model.register_load_state_dict_post_hook(post)
    model.load_state_dict(model.state_dict())
    assert seen[0].shape == (1, 4)
    assert model[0].weight.dtype == mk.float64
    assert _guard.state() == (0, 0, False)


def test_forward_waiting_on_another_threads_forward_does_not_deadlock_a_writer():
    # the outer forward waits for a forward in another thread while a writer is pending:
    # the inner reader defers to the writer only for a bounded time, then goes in
    inner = nn.Linear(3, 3).eval()
    writer_waiting = threading.Event()

    class Outer(nn.Module):
        def forward(self, x):
            while _guard.state()[1] == 0:  # until the writer waits for this call
                time.sleep(0.001)
            writer_waiting.set()
            res = []
            t = threading.Thread(target=lambda: res.append(inner(x)))
            t.start()
            t.join(30)
            return res[0]

    outer = Outer()
    out = []
    reader = threading.Thread(target=lambda: out.append(outer(np.ones((1, 3), np.float32))))
    reader.start()
    writer = threading.Thread(target=lambda: inner.to(mk.float64))
    while not reader.is_alive():
        pass
    time.sleep(0.05)
    writer.start()
    assert writer_waiting.wait(30)
    reader.join(30)
    writer.join(30)
    assert not reader.is_alive() and not writer.is_alive()
    assert out[0].shape == (1, 3)
    assert inner._packed_keys()["weight"][1] == mk.float64


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_during_a_forward_leaves_the_child_free_to_change_the_model():
    entered, release = threading.Event(), threading.Event()

    class Slow(nn.Module):
        def forward(self, x):
            entered.set()
            release.wait(30)
            return x

    model = nn.Sequential(Slow(), nn.Linear(3, 3))
    reader = threading.Thread(target=lambda: model(np.ones((1, 3), np.float32)))
    reader.start()
    assert entered.wait(30)
    try:
        ctx = multiprocessing.get_context("fork")
        child = ctx.Process(target=_cast_in_child, args=(model,))
        child.start()
        child.join(30)
        assert child.exitcode == 0
    finally:
        release.set()
        reader.join(30)


def _cast_in_child(model):
    model.to(mk.float16)  # the parent's running forward is not in this process
    os._exit(0 if model[1].weight.dtype == mk.float16 else 1)

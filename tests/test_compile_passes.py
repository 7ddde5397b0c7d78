"""The planner (modulekit.compile.passes): the rule pipeline, Context.fuse, planned graphs."""

import numpy as np
import pytest

from modulekit import nn
from modulekit.compile.passes import Context, optimize
from modulekit.compile.rules import PIPELINE


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)) + 1.0)


def _compiled(m, x):
    m.eval().compile()
    m(x)
    return m._compiled.current_graph(), m._compiled._entry().plan


def test_pipeline_rules_are_named_and_documented():
    names = [r.__name__ for r in PIPELINE]
    assert len(set(names)) == len(names)
    assert all(r.__doc__ for r in PIPELINE)


def test_linear_activation_fires_and_keeps_bits():
    x = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    m = MLP()
    want = m(x)
    graph, plan = _compiled(m, x)
    # the captured graph stays as captured; the plan's graph has the fused step
    assert [n.op for n in graph.nodes].count("call_module") == 3
    fused = [n for n in plan.graph.nodes if n.op == "call_fused"]
    assert len(fused) == 1
    assert fused[0].meta["rule"] == "linear_activation"
    assert fused[0].meta["modules"] == ["fc1", "act"]
    assert plan.graph.meta["rules"]["linear_activation"] == 1
    assert "kernel_fc1(" in m.code
    np.testing.assert_array_equal(m(x), want)
    np.testing.assert_array_equal(m(x[:2]), MLP.forward(m, x[:2]))


def test_activation_read_twice_is_not_fused():
    class Two(MLP):
        def forward(self, x):
            h = self.fc1(x)
            return self.fc2(self.act(h)), h

    x = np.ones((2, 16), np.float32)
    m = Two()
    _, plan = _compiled(m, x)
    assert not [n for n in plan.graph.nodes if n.op == "call_fused"]


def test_hooked_layer_is_a_boundary():
    x = np.ones((2, 16), np.float32)
    m = MLP()
    seen = []
    m.act.register_forward_hook(lambda mod, i, o: seen.append(1))
    _, plan = _compiled(m, x)
    assert not [n for n in plan.graph.nodes if n.op == "call_fused"]
    m(x)
    assert len(seen) == 2


def test_fuse_refuses_a_group_read_from_outside_and_leaves_the_graph():
    class Two(MLP):
        def forward(self, x):
            h = self.fc1(x)
            return self.act(h) + h

    x = np.ones((2, 16), np.float32)
    m = Two()
    graph, _ = _compiled(m, x)
    g = graph.copy()
    before = [(n.name, n.op) for n in g.nodes]
    fc1 = next(n for n in g.nodes if n.target == "fc1")
    act = next(n for n in g.nodes if n.target == "act")
    with pytest.raises(ValueError, match="read outside"):
        Context(g, m).fuse([fc1, act], "test", lambda x: x, (fc1.args[0],))
    assert [(n.name, n.op) for n in g.nodes] == before


def test_optimize_reports_counts_per_rule():
    x = np.ones((2, 16), np.float32)
    m = MLP()
    graph, _ = _compiled(m, x)
    g = graph.copy()
    assert optimize(g, m) == {r.__name__: (1 if r.__name__ == "linear_activation" else 0)
                              for r in PIPELINE}
    assert optimize(graph.copy(), m, pipeline=()) == {}

import json
import time

import numpy as np
import pytest

import modulekit as mk
from modulekit import nn


class Sleep(nn.Module):
    """A layer whose forward takes a known time."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def forward(self, x):
        time.sleep(self.seconds)
        return x


def model():
    return nn.Sequential(
        nn.Linear(16, 32), nn.ReLU(),
        nn.Sequential(Sleep(0.004), nn.Sequential(Sleep(0.002))),
        nn.Linear(32, 4),
    )


def test_records_every_call_with_shapes_and_flops():
    m = model()
    x = np.ones((3, 16), np.float32)
    with mk.profile(m) as prof:
        m(x)
        m(x)
    paths = {e.path for e in prof.events}
    assert paths == {"Sequential", "0", "1", "2", "2.0", "2.1", "2.1.0", "3"}
    rows = {r["name"]: r for r in prof.key_averages()}
    assert rows["0"]["calls"] == 2 and rows["0"]["type"] == "Linear"
    assert rows["0"]["input_shapes"] == [(3, 16)]
    assert rows["3"]["flops"] == 2 * (2 * 3 * 32 * 4)
    assert rows["0"]["gflops"] > 0 and rows["1"]["gflops"] is None


def test_self_time_attribution_in_nested_containers():
    m = model()
    prof = mk.profile(m, np.ones((1, 16), np.float32), repeat=3, warmup=1)
    rows = {r["name"]: r for r in prof.key_averages()}
    assert rows["2.0"]["calls"] == 3
    # the sleeps own their time; the containers around them only their own overhead
    assert rows["2.0"]["self"] >= 3 * 0.004 and rows["2.1.0"]["self"] >= 3 * 0.002
    assert rows["2.1"]["self"] < rows["2.1.0"]["self"]
    assert rows["2"]["total"] >= rows["2.0"]["total"] + rows["2.1"]["total"]
    assert rows["2"]["self"] == pytest.approx(
        rows["2"]["total"] - rows["2.0"]["total"] - rows["2.1"]["total"]
    )
    # self times add up to the root's total, and that is within the wall time
    total_self = sum(r["self"] for r in rows.values())
    assert total_self == pytest.approx(rows["Sequential"]["total"], rel=1e-9)
    assert total_self <= prof.wall_time
    assert total_self >= 0.8 * prof.wall_time


def test_hooks_removed_after_the_context():
    m = model()
    with mk.profile(m):
        assert all(mod._has_hooks for mod in m.modules())
    assert not any(mod._has_hooks for mod in m.modules())
    mk.profile(m, np.ones((1, 16), np.float32))
    assert not any(mod._has_hooks for mod in m.modules())


def test_hooks_removed_when_forward_raises():
    m = model()
    with pytest.raises(ValueError):
        with mk.profile(m) as prof:
            m(np.ones((1, 5), np.float32))  # wrong width: Linear refuses
    assert not any(mod._has_hooks for mod in m.modules())
    assert prof._stack() == []  # always_call hooks closed every open call
    assert {e.path for e in prof.events} == {"Sequential", "0"}


def test_table_groups_and_sorts():
    m = model()
    prof = mk.profile(m, np.ones((2, 16), np.float32), repeat=2)
    text = prof.table(sort_by="self", row_limit=3)
    lines = text.splitlines()
    assert lines[1].split()[:3] == ["Name", "Type", "Self"]
    assert len([ln for ln in lines if ln and not ln.startswith("-")]) == 1 + 3 + 1
    assert lines[3].split()[0] == "2.0"  # the longest sleep leads
    by_type = prof.table(group_by="type", row_limit=None)
    assert "Sleep" in by_type and "Linear" in by_type
    with pytest.raises(ValueError, match="sort_by"):
        prof.table(sort_by="nope")
    with pytest.raises(ValueError, match="group_by"):
        prof.table(group_by="nope")


def test_chrome_trace_is_valid_trace_event_json(tmp_path):
    m = model()
    prof = mk.profile(m, np.ones((2, 16), np.float32))
    path = prof.export_chrome_trace(tmp_path / "trace.json")
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    assert len(events) == len(prof.events)
    for e in events:
        assert e["ph"] == "X" and e["ts"] >= 0 and e["dur"] >= 0
        assert {"name", "cat", "pid", "tid", "args"} <= set(e)
    with pytest.raises(RuntimeError, match="no events"):
        mk.profile(m).export_chrome_trace(tmp_path / "empty.json")


def test_bad_arguments():
    with pytest.raises(ValueError, match="repeat"):
        mk.profile(model(), np.ones((1, 16)), repeat=0)


def test_warmup_runs_hooked_and_unrecorded():
    # a fused step runs unfused under the profiler's hooks; its first hooked call is the one
    # that may pack weights, so the warm-up must run with the hooks in place
    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append(len(self._forward_hooks))
            return x

    m = nn.Sequential(Probe())
    prof = mk.profile(m, np.ones((1, 4), np.float32), repeat=2, warmup=3)
    assert seen == [1] * 5
    rows = {r["name"]: r for r in prof.key_averages()}
    assert rows["0"]["calls"] == 2 and rows["Sequential"]["calls"] == 2
    assert not m._forward_hooks and not m[0]._forward_hooks


# ---- compiled modules: the profile runs the plan, step by step ----------------------------
class Block(nn.Module):
    """A residual block with glue in its own forward (the add) around a fusable pair."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(16, 16)

    def forward(self, x):
        h = self.act(self.fc(x))  # read twice: fc+act fuse (linear_activation), not a chain
        return self.fc2(h) + h


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.block(x))


def _compiled(x):
    m = Net().eval()
    m.compile()
    return m, m(x)


def test_compiled_module_is_profiled_as_its_plan(tmp_path):
    x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
    m, want = _compiled(x)
    epoch = mk.module.structure_epoch()
    prof = mk.profile(m, x, repeat=3)
    # no hooks went in, so the plan was not captured again, and it ran as it runs unprofiled
    assert mk.module.structure_epoch() == epoch and m._compiled.captures == 1
    assert m._compiled.observer is None
    np.testing.assert_array_equal(m(x), want)
    rows = {r["name"]: r for r in prof.key_averages()}
    # the planner fused fc+act: one row for the step, named by its first module
    step = rows["block.fc"]
    assert step["type"] == "Linear+ReLU" and step["fused"] == ["block.act"]
    assert "block.act" not in rows
    assert step["calls"] == 3 and step["input_shapes"] == [(2, 16)]
    assert step["flops"] == 3 * 2 * 2 * 16 * 16 and rows["head"]["flops"] == 3 * 2 * 2 * 16 * 4
    # glue (the residual add) is the block's self time; the block's total holds its steps
    assert rows["block"]["self"] > 0
    assert rows["block"]["total"] == pytest.approx(
        rows["block"]["self"] + step["total"] + rows["block.fc2"]["total"])
    assert rows["Net"]["total"] >= rows["block"]["total"] + rows["head"]["total"]
    total_self = sum(r["self"] for r in rows.values())
    assert total_self == pytest.approx(rows["Net"]["total"], rel=1e-9)
    table = prof.table()
    assert "Fused" in table and "Linear+ReLU" in table
    line = next(ln for ln in table.splitlines() if ln.startswith("block.fc "))
    assert " act " in f" {line} "
    assert "yes" in prof.table(group_by="type")
    with open(prof.export_chrome_trace(tmp_path / "t.json")) as f:
        trace = json.load(f)["traceEvents"]
    fused = [e for e in trace if e["name"] == "block.fc"]
    assert fused and fused[0]["args"]["fused"] == ["block.act"]
    assert fused[0]["args"]["rule"] == "linear_activation"


def test_compiled_child_of_a_hooked_parent():
    x = np.ones((1, 16), np.float32)

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = Net().eval()
            self.after = Sleep(0.002)

        def forward(self, x):
            return self.after(self.net(x))

    o = Outer().eval()
    o.net.compile()
    want = o(x)
    # the hooks on Outer move the epoch: the warm-up call captures the child again
    prof = mk.profile(o, x, repeat=2, warmup=1)
    rows = {r["name"]: r for r in prof.key_averages()}
    assert rows["net.block.fc"]["fused"] == ["net.block.act"]
    assert rows["net"]["calls"] == 2 and rows["after"]["calls"] == 2
    # the plan's time is the hooked parent's child time, not its self time
    assert rows["Outer"]["self"] < rows["after"]["self"]
    assert rows["Outer"]["total"] >= rows["net"]["total"] + rows["after"]["total"]
    assert not o._forward_hooks and o.net._compiled.observer is None
    np.testing.assert_array_equal(o(x), want)


def test_profiling_a_plan_twice_at_once_is_refused():
    m, _ = _compiled(np.ones((1, 16), np.float32))
    with mk.profile(m) as prof:
        with pytest.raises(RuntimeError, match="already recording"):
            prof.__enter__()


def test_recorded_calls_run_without_the_cyclic_collector():
    """The profile's own calls pause Python's garbage collector (a collection would be
    charged to the step it interrupts) and restore it after."""
    import gc

    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append(gc.isenabled())
            return x

    assert gc.isenabled()
    mk.profile(Probe(), np.zeros(3), repeat=3, warmup=2)
    assert seen == [True, True, False, False, False] and gc.isenabled()

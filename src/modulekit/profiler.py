"""A per-layer profiler that measures the program that runs.

``with modulekit.profile(model) as prof: model(x)`` records every module call; so does
``prof = modulekit.profile(model, x, repeat=10, warmup=2)``, which runs the calls itself. Then
``print(prof.table())`` shows, per module path (or per type), the calls, total and self time,
their share of the whole, the input and output shapes, for Linear and Conv layers the GFLOP/s
reached, and which modules each fused step covers; ``prof.export_chrome_trace(path)`` writes
a trace for chrome://tracing or Perfetto.

Two ways of recording, chosen per part of the tree:

* a **compiled** module (``Module.compile()``, and everything below it) runs its plan with an
  observer (:meth:`modulekit.compile.plan.Plan.observed`) that timestamps each step, so the
  profile measures the fused program the module runs without the profiler. A step's row is
  named by the first module it covers (``layer1.0.conv1``), its type joins the covered types
  (``Conv2d+BatchNorm2d+ReLU``) and its "Fused" column names the others (``bn1+relu``),
  which get no row of their own. Array glue in a module's forward (``out += identity``, a
  reshape) is that module's self time; each module above the steps gets a row whose total is
  the sum of the steps under it, as in eager mode;
* every other module is timed by a forward pre-hook and hook, removed when the profile ends.
  Registering and removing them changes the structure epoch, so the plans of compiled
  modules in the same tree are captured again on their next call (the same plans: a
  capture does not look above its module); ``warmup`` calls absorb that.

With recording off, a compiled module checks one attribute per call and nothing else.
"""

from __future__ import annotations

import gc
import json
import os
import threading
import time
from dataclasses import dataclass, field

import numpy as np

__all__ = ["profile", "Event"]


@dataclass
class Event:
    """One module call."""

    path: str
    type: str
    start: float  # seconds, perf_counter
    total: float  # seconds, wall time between the pre-hook and the hook
    self_time: float  # total minus the children's totals
    thread: int
    input_shapes: list = field(default_factory=list)
    output_shapes: list = field(default_factory=list)
    flops: int = 0
    #: paths of the modules a fused plan step covers besides ``path`` (empty: not fused)
    fused: list = field(default_factory=list)
    #: the planner rule that made the step ("" for an unfused call)
    rule: str = ""


def _shapes(value):
    if isinstance(value, (tuple, list)):
        return [s for v in value for s in _shapes(v)]
    shape = getattr(value, "shape", None)
    return [tuple(shape)] if shape is not None else []


def _flops(module, inputs, output):
    """Multiply-adds x 2 of a Linear- or Conv-like call, from its geometry; 0 if unknown."""
    out_shape = _shapes(output)
    if not out_shape:
        return 0
    return _flops_of(module, out_shape[0])


def _computes(module) -> bool:
    """Whether ``_flops_of`` counts ``module``'s work (a Linear- or Conv-like layer)."""
    return (hasattr(module, "in_features") and hasattr(module, "out_features")) or (
        hasattr(module, "in_channels") and hasattr(module, "kernel_size"))


def _flops_of(module, out_shape) -> int:
    out_numel = int(np.prod(out_shape)) if out_shape else 1
    if hasattr(module, "in_features") and hasattr(module, "out_features"):
        return 2 * out_numel * int(module.in_features)
    if hasattr(module, "in_channels") and hasattr(module, "kernel_size"):
        k = np.prod(module.kernel_size) if np.ndim(module.kernel_size) else module.kernel_size ** 2
        groups = getattr(module, "groups", 1)
        return int(2 * out_numel * (module.in_channels // groups) * k)
    return 0


class profile:
    """Profile every module call of ``model``.

    Parameters
    ----------
    model : Module
        The root module; every module in its tree is hooked.
    *inputs
        When given, the profiler calls ``model(*inputs)`` ``warmup`` times unrecorded, then
        ``repeat`` times recorded, and returns with the hooks already removed. The warm-up
        calls run with the hooks installed: a hooked model runs its fused steps layer by
        layer, and a layer's first unfused call may pack its weights, which the recorded
        calls should not include.
    repeat, warmup : int
        Recorded and unrecorded calls when ``inputs`` are given. The warm-up calls run with
        the recording installed: a layer's first call may pack its weights and a compiled
        module's first call after the hooks went in captures its forward again, and the
        recorded calls should include neither. Python's cyclic garbage collector is paused
        during the recorded calls: the events the profile keeps grow its work, and a
        collection inside a call would be charged to whichever step it interrupted (several
        milliseconds with torch imported).
    """

    def __init__(self, model, *inputs, repeat=1, warmup=0):
        if repeat < 1 or warmup < 0:
            raise ValueError(f"expected repeat >= 1 and warmup >= 0, got {repeat}, {warmup}")
        self.model = model
        self.events: list[Event] = []
        self.wall_time = 0.0
        self._handles = []
        self._observed = []  # the CompiledCalls whose plans run with our observer
        self._plans: dict = {}  # id(plan) -> (plan, what each step stands for)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._t0 = None
        if inputs:
            with self:
                for _ in range(warmup):
                    model(*inputs)
                self.events.clear()
                self._t0 = time.perf_counter()
                enabled = gc.isenabled()
                gc.disable()
                try:
                    for _ in range(repeat):
                        model(*inputs)
                finally:
                    if enabled:
                        gc.enable()

    # ---- recording --------------------------------------------------------------------
    def __enter__(self):
        if self._handles or self._observed:
            raise RuntimeError("this profile is already recording")
        compiled: list[str] = []  # paths of the outermost compiled modules
        for path, module in self.model.named_modules():
            if any(path == c or path.startswith(c + ".") or c == "" for c in compiled):
                continue
            call = module.__dict__.get("_compiled")
            if call is not None:
                compiled.append(path)
                call.observer = self._observer(path, module)
                self._observed.append(call)
                continue
            name = path or type(module).__name__
            self._handles.append(
                module.register_forward_pre_hook(self._make_pre_hook(name))
            )
            self._handles.append(
                module.register_forward_hook(self._make_hook(name), always_call=True)
            )
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall_time += time.perf_counter() - self._t0
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for call in self._observed:
            call.observer = None
        self._observed = []
        self._plans.clear()
        return False

    def _stack(self):
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _make_pre_hook(self, path):
        def pre_hook(module, args):
            # [path, start, children's total, input shapes]
            self._stack().append([path, time.perf_counter(), 0.0, _shapes(args)])

        return pre_hook

    def _make_hook(self, path):
        def hook(module, args, output):
            end = time.perf_counter()
            stack = self._stack()
            if not stack or stack[-1][0] != path:
                return None
            _, start, children, in_shapes = stack.pop()
            total = end - start
            if stack:
                stack[-1][2] += total
            event = Event(path, type(module).__name__, start, total, total - children,
                          threading.get_ident(), in_shapes, _shapes(output),
                          _flops(module, args, output))
            with self._lock:
                self.events.append(event)
            return None

        return hook

    def _observer(self, root_path, root):
        """The ``CompiledCall.observer`` of the compiled module ``root`` at ``root_path``."""
        def run(call, plan, arrays):
            fn, steps = plan.observed()
            known = self._plans.get(id(plan))
            if known is None or known[0] is not plan:
                known = self._plans[id(plan)] = (plan, _plan_rows(
                    steps, plan.graph.inputs, root, root_path, self.model))
            marks = []

            def observe(value, _append=marks.append, _clock=time.perf_counter):
                _append((_clock(), getattr(value, "shape", None)))

            start = time.perf_counter()
            out = fn(observe, *arrays)
            end = time.perf_counter()
            events = _plan_events(known[1], arrays, marks, start, end, threading.get_ident())
            stack = self._stack()
            if stack:  # a hooked module above: the plan's time is its child's
                stack[-1][2] += end - start
            with self._lock:
                self.events.extend(events)
            return out

        return run

    # ---- reports ----------------------------------------------------------------------
    def key_averages(self, group_by="path"):
        """Aggregate the events by module ``"path"`` or by ``"type"``: a list of dicts."""
        if group_by not in ("path", "type"):
            raise ValueError(f"group_by must be 'path' or 'type', got {group_by!r}")
        rows = {}
        order = []
        for e in self.events:
            key = e.path if group_by == "path" else e.type
            row = rows.get(key)
            if row is None:
                row = rows[key] = {"name": key, "type": e.type, "calls": 0, "total": 0.0,
                                   "self": 0.0, "flops": 0, "input_shapes": e.input_shapes,
                                   "output_shapes": e.output_shapes}
                order.append(key)
                row["fused"] = e.fused
            row["calls"] += 1
            row["total"] += e.total
            row["self"] += e.self_time
            row["flops"] += e.flops
        # The self times of all calls add up to the time spent inside the root's calls.
        denom = sum(r["self"] for r in rows.values()) or 1.0
        out = []
        for key in order:
            r = rows[key]
            r["self_pct"] = 100.0 * r["self"] / denom
            r["total_pct"] = 100.0 * r["total"] / denom
            r["avg"] = r["total"] / r["calls"]
            r["gflops"] = r["flops"] / r["self"] / 1e9 if r["flops"] and r["self"] > 0 else None
            out.append(r)
        return out

    def table(self, sort_by="self", row_limit=20, group_by="path"):
        """A text table in the style of torch.profiler's ``key_averages().table()``.

        ``sort_by`` is one of "self", "total", "calls", "avg", "gflops"; ``group_by`` is
        "path" (one row per module) or "type" (one row per layer class).
        """
        keys = {"self": "self", "total": "total", "calls": "calls", "avg": "avg",
                "gflops": "gflops"}
        if sort_by not in keys:
            raise ValueError(f"sort_by must be one of {', '.join(keys)}, got {sort_by!r}")
        rows = self.key_averages(group_by)
        rows.sort(key=lambda r: r[keys[sort_by]] or 0, reverse=True)
        if row_limit is not None and row_limit > 0:
            rows = rows[:row_limit]
        headers = ["Name", "Type", "Self %", "Self", "Total %", "Total", "Avg", "Calls",
                   "GFLOP/s", "Input shapes"]
        fused = any(r["fused"] for r in rows)
        if fused:
            headers.insert(2, "Fused")
        lines = []
        for r in rows:
            line = [
                r["name"], r["type"], f"{r['self_pct']:.1f}%", _fmt(r["self"]),
                f"{r['total_pct']:.1f}%", _fmt(r["total"]), _fmt(r["avg"]), str(r["calls"]),
                f"{r['gflops']:.1f}" if r["gflops"] else "",
                " ".join(str(list(s)) for s in r["input_shapes"])[:40],
            ]
            if fused:
                line.insert(2, _relative(r["name"], r["fused"]) if group_by == "path"
                            else ("yes" if r["fused"] else ""))
            lines.append(line)
        widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h)
                  for i, h in enumerate(headers)]
        sep = "-" * (sum(widths) + 2 * (len(widths) - 1))
        out = [sep, "  ".join(h.ljust(w) for h, w in zip(headers, widths)), sep]
        out += ["  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in lines]
        out.append(sep)
        recorded = sum(e.self_time for e in self.events)
        out.append(f"Self time total: {_fmt(recorded)}; wall time in the profile: "
                   f"{_fmt(self.wall_time)}")
        return "\n".join(out)

    def export_chrome_trace(self, path):
        """Write the events as Chrome trace-event JSON (chrome://tracing, Perfetto)."""
        if not self.events:
            raise RuntimeError("no events recorded: call the model inside the profile first")
        origin = min(e.start for e in self.events)
        events = [{
            "name": e.path, "cat": e.type, "ph": "X", "pid": os.getpid(), "tid": e.thread,
            "ts": (e.start - origin) * 1e6, "dur": e.total * 1e6,
            "args": {"type": e.type, "input_shapes": [list(s) for s in e.input_shapes],
                     "output_shapes": [list(s) for s in e.output_shapes],
                     "self_us": e.self_time * 1e6, "fused": e.fused, "rule": e.rule},
        } for e in self.events]
        with open(path, "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
        return path


def _join(root_path: str, rel: str) -> str:
    if not root_path:
        return rel
    return f"{root_path}.{rel}" if rel else root_path


def _relative(path: str, others: list) -> str:
    """``others`` named from ``path``'s parent: ``bn1+relu`` for ``layer1.0.conv1``."""
    parent = path.rsplit(".", 1)[0] + "." if "." in path else ""
    return "+".join(o[len(parent):] if parent and o.startswith(parent) else o for o in others)


def _plan_rows(steps, graph_inputs, root, root_path: str, model) -> dict:
    """What each step of a plan of ``root`` stands for in the profile: its row (a module or
    fused group) or the module whose forward it is glue in; and the modules above them."""
    from modulekit.module import Module

    def module_at(rel):
        try:
            return root.get_submodule(rel) if rel else root
        except (AttributeError, KeyError):
            return None

    def name(rel):
        return _join(root_path, rel) or type(model).__name__

    rows = []
    containers: dict[str, tuple[str, str]] = {"": (name(""), type(root).__name__)}
    index = {id(n): ("input", i) for i, n in enumerate(graph_inputs)}
    for k, node in enumerate(steps):
        index[id(node)] = k
        meta = node.meta
        if node.op in ("call_module", "call_fused"):
            covered = list(meta.get("modules") or [meta.get("path") or node.target])
            rel = covered[0]
            mods = [module_at(c) for c in covered]
            lead = mods[0] if mods[0] is not None else (
                node.fn if isinstance(node.fn, Module) else None)
            counted = [m for m in mods if m is not None and _computes(m)]
            flops_by = lead if lead is not None and counted == [lead] else None
            row = (name(rel), meta.get("module_type") or node.target,
                   [name(c) for c in covered[1:]], meta.get("rule", ""), flops_by)
            parent = rel.rsplit(".", 1)[0] if "." in rel else ""
        else:
            row = None
            parent = rel = meta.get("scope") or ""
        ancestors = [""]
        parts = parent.split(".") if parent else []
        for i in range(1, len(parts) + 1):
            ancestors.append(".".join(parts[:i]))
        for a in ancestors:
            if a not in containers:
                m = module_at(a)
                containers[a] = (name(a), type(m).__name__ if m is not None else a)
        inputs = [index.get(id(n)) for n in node.inputs]
        rows.append((row, rel if row is None else None, ancestors, inputs))
    return {"steps": rows, "containers": containers}


def _plan_events(info, arrays, marks, start, end, thread) -> list[Event]:
    """The events of one observed plan run: one per module or fused step, one per module
    above them (total: the steps under it; self: its glue), the compiled module's own total
    being the whole run."""
    containers = info["containers"]
    total = dict.fromkeys(containers, 0.0)
    own = dict.fromkeys(containers, 0.0)
    first = {}
    shapes: list = []
    events = []
    for k, (row, glue, ancestors, inputs) in enumerate(info["steps"]):
        t0, t1 = marks[k][0], marks[k + 1][0]
        dt = t1 - t0
        out_shape = marks[k + 1][1]
        shapes.append(out_shape)
        for a in ancestors:
            total[a] += dt
            first.setdefault(a, t0)
        if row is None:
            own[glue] += dt
            continue
        path, kind, fused, rule, flops_by = row
        in_shapes = []
        for i in inputs:
            shape = (shapes[i] if type(i) is int
                     else arrays[i[1]].shape if i is not None else None)
            if shape is not None:
                in_shapes.append(tuple(shape))
        outs = [tuple(out_shape)] if out_shape is not None else []
        flops = _flops_of(flops_by, outs[0]) if flops_by is not None and outs else 0
        events.append(Event(path, kind, t0, dt, dt, thread, in_shapes, outs, flops,
                            fused, rule))
    run = end - start
    own[""] += run - total[""]
    total[""] = run
    first[""] = start
    head = []
    for rel, (path, kind) in containers.items():
        if rel in first:
            head.append(Event(path, kind, first[rel], total[rel], own[rel], thread,
                              [tuple(a.shape) for a in arrays] if rel == "" else []))
    return head + events


def _fmt(seconds):
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f}us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f}ms"
    return f"{seconds:.3f}s"

"""A per-layer profiler built on forward hooks.

``with modulekit.profile(model) as prof: model(x)`` records every module call; so does
``prof = modulekit.profile(model, x, repeat=10, warmup=2)``, which runs the calls itself. Then
``print(prof.table())`` shows, per module path (or per type), the calls, total and self time,
their share of the whole, the input and output shapes and, for Linear and Conv layers, the
GFLOP/s reached; ``prof.export_chrome_trace(path)`` writes a trace for chrome://tracing or
Perfetto. The hooks are removed when the context ends, so profiling off costs nothing.
"""

from __future__ import annotations

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
    out_shape = out_shape[0]
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
        Recorded and unrecorded calls when ``inputs`` are given.
    """

    def __init__(self, model, *inputs, repeat=1, warmup=0):
        if repeat < 1 or warmup < 0:
            raise ValueError(f"expected repeat >= 1 and warmup >= 0, got {repeat}, {warmup}")
        self.model = model
        self.events: list[Event] = []
        self.wall_time = 0.0
        self._handles = []
        self._local = threading.local()
        self._lock = threading.Lock()
        self._t0 = None
        if inputs:
            with self:
                for _ in range(warmup):
                    model(*inputs)
                self.events.clear()
                self._t0 = time.perf_counter()
                for _ in range(repeat):
                    model(*inputs)

    # ---- recording --------------------------------------------------------------------
    def __enter__(self):
        if self._handles:
            raise RuntimeError("this profile is already recording")
        for path, module in self.model.named_modules():
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
        lines = []
        for r in rows:
            lines.append([
                r["name"], r["type"], f"{r['self_pct']:.1f}%", _fmt(r["self"]),
                f"{r['total_pct']:.1f}%", _fmt(r["total"]), _fmt(r["avg"]), str(r["calls"]),
                f"{r['gflops']:.1f}" if r["gflops"] else "",
                " ".join(str(list(s)) for s in r["input_shapes"])[:40],
            ])
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
                     "self_us": e.self_time * 1e6},
        } for e in self.events]
        with open(path, "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
        return path


def _fmt(seconds):
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f}us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f}ms"
    return f"{seconds:.3f}s"

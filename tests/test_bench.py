"""The bench runner end to end (--quick), its JSON, and the page generated from it.

Timings are never asserted: only that every suite runs, the rows have the documented form and
the report renders them.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from modulekit.bench import SUITES
from modulekit.bench.bars import BARS, ceiling_text, check_bars
from modulekit.bench.report import render


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "run.json"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, "-m", "modulekit.bench", "--quick", "--json", str(out)],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout, json.loads(out.read_text())


def test_quick_run_covers_every_suite(quick_run):
    stdout, result = quick_run
    for i, name in enumerate(SUITES, 1):
        assert f"[{i}/{len(SUITES)}] {name}" in stdout  # progress shown as it runs
    assert set(result["suites"]) == set(SUITES)
    ran = {name for name, status in result["suites"].items() if "error" not in status}
    assert ran == {r["suite"] for r in result["rows"]}
    assert {"overhead", "casts", "gemm", "conv", "checkpoint_io"} <= ran
    for row in result["rows"]:
        assert {"suite", "case", "impl"} <= set(row)
        # every row, whatever its suite, carries its median and its spread
        assert row.get("error") or 0 < row["low"] <= row["seconds"] <= row["high"], row
    machine = result["machine"]
    assert machine["isa"] in machine["isa_available"] and machine["threads"] >= 1
    assert machine["openblas_env_unset"] or not os.environ.get("OPENBLAS_CORETYPE")
    if any(r["impl"] == "torch" for r in result["rows"]):
        assert any("speedup" in r for r in result["rows"])


def test_bars_name_real_cases(quick_run):
    _, result = quick_run
    cases = {(r["suite"], r["case"]) for r in result["rows"]}
    suites_run = {r["suite"] for r in result["rows"]}
    # a model without an onnxruntime session (its ONNX export failed) has no cases beside one
    ort = {r["case"].split(" batch")[0] for r in result["rows"] if r["impl"] == "onnxruntime"}
    for _text, suite, case, _peer, _need, *_floor in BARS:
        # quick runs use smaller sizes for some cases; the rest must match a row exactly
        if suite in suites_run and "MB" not in case and "batch 32" not in case \
                and "seq 128" not in case and "MiB" not in case \
                and ("onnxruntime" not in case or case.split(" batch")[0] in ort):
            assert (suite, case) in cases, (_text, suite, case)


def test_report_renders_the_run(quick_run, tmp_path):
    _, result = quick_run
    page = render(result, plot="perf.png", notes="## Notes\n\nhand-written")
    assert page.startswith("# Performance")
    assert "python -m modulekit.bench --quick" in page
    assert "](perf.png)" in page
    assert "## Targets" in page and "#" not in page.split("## Targets")[1].split("\n## ")[0]
    assert "hand-written" in page
    for suite in {r["suite"] for r in result["rows"]}:
        assert f"## {suite}" in page


def test_report_renders_one_table_per_machine_kind(quick_run):
    # docs/performance.md keeps a run per kind of machine: targets side by side, each suite's
    # table per machine, a suite one run lacks said so
    _, result = quick_run
    other = json.loads(json.dumps(result))
    other["machine"]["cpu"] = "Intel(R) Xeon(R) Platinum"
    other["machine"]["cpu_family"] = ["GenuineIntel", 6, 143]
    other["rows"] = [r for r in other["rows"] if r["suite"] != "overhead"]
    other["suites"]["overhead"] = {"error": "not measured"}
    page = render([("amd-zen4", result), ("intel-amx", other)], plot="perf-{kind}.png")
    assert "## Machines" in page and "### amd-zen4" in page and "### intel-amx" in page
    assert "GenuineIntel family 6, model 143" in page
    targets = page.split("## Targets")[1].split("\n## ")[0]
    assert "| target | needed | amd-zen4 | intel-amx |" in targets
    assert "](perf-amd-zen4.png)" in page and "](perf-intel-amx.png)" in page
    overhead = page.split("\n## overhead")[1].split("\n## ")[0]
    assert "### intel-amx\n\nNot run: not measured" in overhead
    for suite in {r["suite"] for r in result["rows"]}:
        assert page.count(f"\n## {suite}\n") == 1


def test_check_bars_marks_met_and_missed():
    rows = [
        {"suite": "overhead", "case": "Identity call", "impl": "modulekit", "seconds": 1.0},
        {"suite": "overhead", "case": "Identity call", "impl": "torch", "seconds": 1.5},
    ]
    from modulekit.bench._timing import with_ratios

    (bar,) = check_bars(with_ratios(rows))
    assert bar["speedup"] == 1.5 and not bar["met"]
    rows[1]["seconds"] = 3.0
    (bar,) = check_bars(with_ratios(rows))
    assert bar["met"]


def test_check_bars_lower_needs_without_amx():
    """The bfloat16-and-int8 bars ask 1.2x on an AMX machine and 1.0x on a CPU without AMX;
    the others do not depend on it."""
    from modulekit.bench._timing import with_ratios

    case = ("int8", "ResNet-18 int8 static batch 1")
    rows = [{"suite": case[0], "case": case[1], "impl": "modulekit", "seconds": 1.0},
            {"suite": case[0], "case": case[1], "impl": "onnxruntime", "seconds": 1.1},
            {"suite": "overhead", "case": "Identity call", "impl": "modulekit", "seconds": 1.0},
            {"suite": "overhead", "case": "Identity call", "impl": "torch", "seconds": 1.5}]
    with_ratios(rows)
    amx = {"cpu_flags": ["avx512f", "avx512_vnni", "amx_tile"]}
    vnni = {"cpu_flags": ["avx512f", "avx512_vnni"]}
    for machine, need, met in ((None, 1.2, False), (amx, 1.2, False), (vnni, 1.0, True)):
        bars = {b["case"]: b for b in check_bars(rows, machine)}
        assert bars[case[1]]["needed"] == need and bars[case[1]]["met"] == met
        assert bars["Identity call"]["needed"] == 2.0


def test_check_bars_reports_the_ceiling_a_floor_allows():
    from modulekit.bench._timing import with_ratios
    from modulekit.bench.casts import FLOOR_NEW

    case = "float32 -> float16 64 MiB, new array"
    rows = [
        {"suite": "casts", "case": case, "impl": "modulekit", "seconds": 2.0},
        {"suite": "casts", "case": case, "impl": "numpy astype", "seconds": 30.0},
        {"suite": "casts", "case": case, "impl": FLOOR_NEW, "seconds": 1.5},
    ]
    bars = {b["peer"]: b for b in check_bars(with_ratios(rows))}
    bar = bars["numpy astype"]
    assert bar["speedup"] == 15.0 and not bar["met"] and bar["ceiling"] == 20.0
    assert "at most 20.00x" in ceiling_text(bar)
    # the floor is a peer of its own: a new-array cast within 1.5x of allocate-and-write
    assert bars[FLOOR_NEW]["speedup"] == 0.75 and bars[FLOOR_NEW]["met"]
    rows[0]["seconds"] = 2.5
    assert not {b["peer"]: b for b in check_bars(with_ratios(rows))}[FLOOR_NEW]["met"]
    del rows[2]
    (bar,) = check_bars(with_ratios(rows))
    assert "ceiling" not in bar and ceiling_text(bar) == ""


def test_unknown_suite_is_refused():
    proc = subprocess.run([sys.executable, "-m", "modulekit.bench", "nope"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown suite" in proc.stderr


def test_help_speaks_to_users():
    """No internal issue numbers in what ``--help`` prints."""
    proc = subprocess.run([sys.executable, "-m", "modulekit.bench", "--help"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "--quick" in proc.stdout
    assert not re.search(r"#\d|\bissues?\b", proc.stdout, re.IGNORECASE), proc.stdout


def test_interleaved_rotates_and_summarises():
    from modulekit.bench._timing import interleaved

    order, restored = [], []
    funcs = {name: (lambda n=name: order.append(n)) for name in "abc"}
    res = interleaved(funcs, rounds=3, number=2, warmup=0,
                      setup={"b": lambda: restored.append(len(order))})
    assert order == list("aabbcc" "bbccaa" "ccaabb")  # each round starts one later
    assert restored == [2, 6, 16]                    # before every sample of b, untimed
    for stats in res.values():
        assert set(stats) == {"seconds", "low", "high", "best"}
        assert 0 < stats["best"] <= stats["low"] <= stats["seconds"] <= stats["high"]
    with pytest.raises(ValueError, match="unknown"):
        interleaved(funcs, rounds=1, setup={"z": print})


def test_interleaved_calibrates_calls_to_min_time(monkeypatch):
    import types

    from modulekit.bench import _timing

    clock = [0.0]  # a fake clock: each call costs exactly what its function says
    monkeypatch.setattr(_timing, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    calls = {"fast": 0, "slow": 0}

    def timed(name, cost):
        def fn():
            calls[name] += 1
            clock[0] += cost
        return fn

    fast, slow = 2.0**-20, 2.0**-10  # exact in binary: the clock never rounds
    res = _timing.interleaved({"fast": timed("fast", fast), "slow": timed("slow", slow)},
                              rounds=3, min_time=2.0**-7, warmup=1)
    # warm-up call, calibration call, then 3 samples of min_time / cost calls
    assert calls == {"fast": 2 + 3 * 2**13, "slow": 2 + 3 * 2**3}
    assert res["fast"]["seconds"] == fast and res["slow"]["seconds"] == slow


def test_summary_spread():
    from modulekit.bench._timing import summary

    assert summary([3.0, 1.0, 2.0]) == {"seconds": 2.0, "low": 1.0, "high": 3.0, "best": 1.0}
    assert summary([float(v) for v in range(1, 10)]) == {
        "seconds": 5.0, "low": 3.0, "high": 7.0, "best": 1.0}
    with pytest.raises(ValueError):
        summary([])


def test_roles_and_ratio_spread():
    from modulekit.bench._timing import role, with_ratios

    rows = [
        {"suite": "s", "case": "c", "impl": "modulekit", "seconds": 2.0, "low": 1.0, "high": 4.0},
        {"suite": "s", "case": "c", "impl": "numpy", "seconds": 4.0, "low": 3.0, "high": 8.0},
        {"suite": "s", "case": "c", "impl": "modulekit 1 thread", "seconds": 3.0},
        {"suite": "s", "case": "c", "impl": "floor: memcpy", "seconds": 1.0},
    ]
    with_ratios(rows)
    assert [role(r) for r in rows] == ["modulekit", "peer", "variant", "floor"]
    assert rows[1]["speedup"] == 2.0
    assert (rows[1]["speedup_low"], rows[1]["speedup_high"]) == (0.75, 8.0)
    assert rows[2]["speedup"] == 1.5 and "speedup_low" not in rows[2]


def test_plot_keeps_reference_rows_apart(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib import pyplot as plt

    from modulekit.bench.__main__ import plot

    rows = [
        {"suite": "s", "case": "c", "impl": "modulekit", "seconds": 2.0, "low": 1.5, "high": 3.0},
        {"suite": "s", "case": "c", "impl": "numpy", "seconds": 1.0, "low": 0.9, "high": 1.1},
        {"suite": "s", "case": "c", "impl": "floor: memcpy", "seconds": 1.0},
    ]
    drawn = []
    savefig = plt.Figure.savefig

    def spy(fig, *args, **kwargs):
        for ax in fig.axes:
            labels = [t.get_text() for t in ax.get_yticklabels()]
            errors = [c for c in ax.containers if hasattr(c, "has_xerr") and c.has_xerr]
            drawn.append((labels, len(errors)))
        return savefig(fig, *args, **kwargs)

    plt.Figure.savefig = spy
    try:
        path = plot(rows, tmp_path / "chart.png")
    finally:
        plt.Figure.savefig = savefig
    assert path.stat().st_size > 0
    # the floor is not drawn among the losses: a panel of its own; error bars from spreads
    assert drawn == [(["c vs numpy"], 1), (["c vs floor: memcpy"], 1)]

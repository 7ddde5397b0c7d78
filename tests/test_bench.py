"""The bench runner end to end (--quick), its JSON, and the page generated from it.

Timings are never asserted: only that every suite runs, the rows have the documented form and
the report renders them.
"""

import json
import os
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
        assert row.get("error") or row["seconds"] > 0
    machine = result["machine"]
    assert machine["isa"] in machine["isa_available"] and machine["threads"] >= 1
    assert machine["openblas_env_unset"] or not os.environ.get("OPENBLAS_CORETYPE")
    if any(r["impl"] == "torch" for r in result["rows"]):
        assert any("speedup" in r for r in result["rows"])


def test_bars_name_real_cases(quick_run):
    _, result = quick_run
    cases = {(r["suite"], r["case"]) for r in result["rows"]}
    suites_run = {r["suite"] for r in result["rows"]}
    for issue, _text, suite, case, _peer, _need, *_floor in BARS:
        # quick runs use smaller sizes for some cases; the rest must match a row exactly
        if suite in suites_run and "MB" not in case and "batch 32" not in case \
                and "seq 128" not in case and "MiB" not in case:
            assert (suite, case) in cases, (issue, suite, case)


def test_report_renders_the_run(quick_run, tmp_path):
    _, result = quick_run
    page = render(result, plot="perf.png", notes="## Notes\n\nhand-written")
    assert page.startswith("# Performance")
    assert "python -m modulekit.bench --quick" in page
    assert "![modulekit speedup over each peer](perf.png)" in page
    assert "hand-written" in page
    for suite in {r["suite"] for r in result["rows"]}:
        assert f"## {suite}" in page


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


def test_check_bars_reports_the_ceiling_a_floor_allows():
    from modulekit.bench._timing import with_ratios
    from modulekit.bench.casts import FLOOR_NEW

    case = "float32 -> float16 64 MiB, new array"
    rows = [
        {"suite": "casts", "case": case, "impl": "modulekit", "seconds": 2.0},
        {"suite": "casts", "case": case, "impl": "numpy astype", "seconds": 30.0},
        {"suite": "casts", "case": case, "impl": FLOOR_NEW, "seconds": 1.5},
    ]
    (bar,) = check_bars(with_ratios(rows))
    assert bar["speedup"] == 15.0 and not bar["met"] and bar["ceiling"] == 20.0
    assert "at most 20.00x" in ceiling_text(bar)
    del rows[2]
    (bar,) = check_bars(with_ratios(rows))
    assert "ceiling" not in bar and ceiling_text(bar) == ""


def test_unknown_suite_is_refused():
    proc = subprocess.run([sys.executable, "-m", "modulekit.bench", "nope"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown suite" in proc.stderr

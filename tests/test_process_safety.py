"""modulekit in multiprocessing: spawn, forkserver, and fork after the OpenMP team started.

libgomp's thread team does not survive fork(): a parallel region in the child waits forever
for the missing workers (GCC bug 60035). modulekit's child then runs serially. Each scenario
runs in a fresh interpreter with a timeout, so a hang fails the test instead of blocking it.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

import modulekit as mk

# the folder the tests import modulekit from (the installed package, or src/ of a checkout)
PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(mk.__file__)))

SCRIPT = textwrap.dedent(
    """
    import json, multiprocessing as mp, sys
    import numpy as np
    import modulekit as mk
    from modulekit._ext import _openmp_helpers as omp

    def build():
        mk.nn.manual_seed(0)
        return mk.nn.Sequential(
            mk.nn.Linear(256, 512), mk.nn.ReLU(), mk.nn.Linear(512, 3)
        ).eval()

    def work(args):
        model, x = args
        mk.set_num_threads(2)  # as the parent (a spawned child starts from the defaults)
        return {
            "out": model(x).tolist(),
            "serial": omp.serial_after_fork(),
            "team": omp.parallel_team_size(),
        }

    if __name__ == "__main__":
        method, start_team = sys.argv[1], sys.argv[2] == "1"
        # start_team: two threads, a real team even on one core (32 x 256 x 512 products are
        # large enough for the packed GEMM to use both); else every kernel gets one thread
        mk.set_num_threads(2 if start_team else 1)
        x = np.random.default_rng(0).normal(size=(64, 256)).astype(np.float32)
        model = build().initialize()
        halves = [x[:32], x[32:]]
        expected = np.concatenate([model(h) for h in halves])
        parent_team = omp.parallel_team_size() if start_team else 0
        ctx = mp.get_context(method)
        with ctx.Pool(2) as pool:  # the model travels pickled (raw weights), re-packs there
            results = pool.map(work, [(model, h) for h in halves])
        got = np.concatenate([np.asarray(r["out"], dtype=np.float32) for r in results])
        print(json.dumps({
            "equal": bool(np.array_equal(got, expected)),
            "max_diff": float(np.abs(got - expected).max()),
            "parent_team": parent_team,
            "children": [{"serial": r["serial"], "team": r["team"]} for r in results],
        }))
    """
)


def run_scenario(tmp_path, method, start_team):
    script = tmp_path / "scenario.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=PKG_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("OMP_NUM_THREADS", None)
    # its own process group: on a hang, the scenario and its pool workers are all killed
    proc = subprocess.Popen(
        [sys.executable, str(script), method, "1" if start_team else "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"multiprocessing with {method!r} hung (no result within 60 s)")
    assert proc.returncode == 0, stderr
    return json.loads(stdout.strip().splitlines()[-1])


needs_openmp = pytest.mark.skipif(
    not mk.threads.openmp_enabled(), reason="built without OpenMP: no thread team to lose"
)


@needs_openmp
def test_fork_after_the_team_started_does_not_hang_and_computes_correctly(tmp_path):
    out = run_scenario(tmp_path, "fork", start_team=True)
    assert out["parent_team"] == 2
    assert out["equal"], out["max_diff"]
    assert out["children"] == [{"serial": True, "team": 1}] * 2


@needs_openmp
def test_fork_before_any_team_keeps_threads(tmp_path):
    # Every kernel was given one thread before the fork, so no team can exist: the children
    # keep full threading. (The fallback is conservative: a parent whose kernels were ever
    # handed more than one thread counts as having a team.)
    out = run_scenario(tmp_path, "fork", start_team=False)
    assert out["equal"], out["max_diff"]
    assert out["children"] == [{"serial": False, "team": 2}] * 2


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_spawn_and_forkserver_keep_full_threading(tmp_path, method):
    out = run_scenario(tmp_path, method, start_team=True)
    assert out["equal"], out["max_diff"]
    team = 2 if mk.threads.openmp_enabled() else 1
    assert out["children"] == [{"serial": False, "team": team}] * 2

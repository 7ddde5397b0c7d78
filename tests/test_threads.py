import os
import subprocess
import sys

import pytest
from threadpoolctl import threadpool_limits

import modulekit as mk
from modulekit._ext import _openmp_helpers


@pytest.fixture(autouse=True)
def _reset_threads():
    yield
    _openmp_helpers.reset_num_threads()


def test_set_and_get_num_threads():
    mk.set_num_threads(1)
    assert mk.get_num_threads() == 1
    mk.set_num_threads(2)
    assert mk.get_num_threads() == 2


def test_set_num_threads_refuses_bad_counts():
    with pytest.raises(ValueError, match="positive"):
        mk.set_num_threads(0)
    with pytest.raises(TypeError, match="int"):
        mk.set_num_threads(1.5)


@pytest.mark.skipif(not mk.threads.openmp_enabled(), reason="built without OpenMP")
def test_threadpoolctl_limit_is_honoured():
    mk.set_num_threads(2)
    with threadpool_limits(1):
        assert mk.get_num_threads() == 1
    assert mk.get_num_threads() == 2


@pytest.mark.skipif(not mk.threads.openmp_enabled(), reason="built without OpenMP")
def test_omp_num_threads_env_is_the_default():
    code = "import modulekit as mk; print(mk.get_num_threads())"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "1", out.stderr
    code = "import modulekit as mk; mk.set_num_threads(2); print(mk.get_num_threads())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "2", out.stderr

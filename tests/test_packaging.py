"""What an installed modulekit promises about itself: the optional integrations name the extra
to install when their package is missing, ``py.typed`` ships, and the version has one source.

The sdist/wheel contents, stripping and the smoke test of an installed wheel are CI steps
(``.ci/run``, ``.ci/check_dist.py``, ``.ci/smoke.py``): they need a build.
"""

import importlib.metadata
import os
import subprocess
import sys

import pytest

import modulekit as mk

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(mk.__file__)))


def _import_without(module: str, blocked: tuple) -> subprocess.CompletedProcess:
    """Import ``module`` in a fresh interpreter in which the ``blocked`` packages cannot be
    imported (a ``None`` entry in ``sys.modules`` makes ``import`` raise ImportError)."""
    code = (
        "import sys\n"
        f"for name in {blocked!r}:\n"
        "    sys.modules[name] = None\n"
        f"import {module}\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_ROOT, env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("modulekit.sklearn", ("sklearn",), "sklearn"),
        ("modulekit.dask", ("dask", "dask.array", "distributed"), "dask"),
    ],
)
def test_optional_module_names_its_extra_when_its_package_is_missing(module, blocked, extra):
    out = _import_without(module, blocked)
    assert out.returncode != 0, out.stdout
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: "), out.stderr
    assert f"pip install 'modulekit[{extra}]'" in last, last


def test_optional_modules_import_when_their_packages_are_there():
    pytest.importorskip("sklearn")
    pytest.importorskip("dask.array")
    out = _import_without("modulekit.sklearn, modulekit.dask", ())
    assert out.returncode == 0, out.stderr


def test_import_modulekit_needs_neither_optional_package():
    optional = ("sklearn", "dask", "threadpoolctl", "torch")
    code = f"import modulekit, sys; print(sorted(m for m in {optional!r} if m in sys.modules))"
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_py_typed_is_in_the_package():
    assert os.path.isfile(os.path.join(os.path.dirname(mk.__file__), "py.typed"))


def test_version_is_the_installed_distributions():
    try:
        dist = importlib.metadata.distribution("modulekit")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("modulekit is not installed (run from a source tree)")
    # the installed distribution is this package (an editable or regular install of it)
    files = {str(f) for f in dist.files or ()}
    if not any(f.startswith("modulekit/") for f in files) and not any(
        f.endswith(".pth") for f in files
    ):
        pytest.skip("the installed modulekit distribution is not the imported package")
    assert dist.version == mk.__version__

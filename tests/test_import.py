"""``import modulekit`` stays light (issue #15 item 5): no heavy or optional package is
imported by it, and bfloat16 still works when first needed. Each check runs in a fresh
interpreter; the timing is measured by ``bench/import_time.py``, not here."""

import os
import subprocess
import sys

import pytest

import modulekit

# Imported only when used (ml_dtypes: a bfloat16 array is needed) or never (optional extras).
HEAVY = ("ml_dtypes", "torch", "sklearn", "dask", "distributed", "pandas", "scipy",
         "transformers", "tokenizers", "onnxruntime", "pyarrow", "matplotlib", "safetensors",
         "numpy.random", "tempfile",
         # modulekit's own, loaded by their first use (modulekit.load/save/profile)
         "modulekit.checkpoint", "modulekit.profiler")


def run(code):
    """Run ``code`` in a fresh interpreter importing this checkout's modulekit; its stdout."""
    src = os.path.dirname(os.path.dirname(os.path.abspath(modulekit.__file__)))
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_modulekit_imports_no_heavy_module():
    loaded = run(
        "import sys, modulekit, modulekit.nn, modulekit.models\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    assert loaded == "[]"


@pytest.mark.parametrize("use", [
    "modulekit.bfloat16.numpy",
    "modulekit.Tensor([1.0]).to('bfloat16').numpy()",
    "modulekit.nn.Linear(2, 2).to('bfloat16').state_dict()['weight'].numpy()",
])
def test_bfloat16_imports_ml_dtypes_on_first_use(use):
    out = run(
        "import sys, modulekit\n"
        "before = 'ml_dtypes' in sys.modules\n"
        f"value = {use}\n"
        "print(before, 'ml_dtypes' in sys.modules, getattr(value, 'dtype', value))"
    )
    assert out == "False True bfloat16"


def test_bfloat16_arrays_made_before_modulekit_is_used_are_recognised():
    out = run(
        "import ml_dtypes, numpy as np, modulekit\n"
        "from modulekit._ext._cast import cast\n"
        "a = np.arange(4, dtype=ml_dtypes.bfloat16)\n"
        "t = modulekit.Tensor(a)\n"
        "print(t.dtype, modulekit.DataType(a.dtype), cast(a, np.float32).tolist(),\n"
        "      cast(np.float32([1.5]), 'bfloat16').dtype, modulekit.nn.functional.relu(a).dtype)"
    )
    assert out == "modulekit.bfloat16 modulekit.bfloat16 [0.0, 1.0, 2.0, 3.0] bfloat16 float32"


def test_bfloat16_checkpoint_loads_in_a_fresh_process(tmp_path):
    path = tmp_path / "bf16.safetensors"
    modulekit.save({"w": modulekit.Tensor([1.0, -2.0]).to("bfloat16")}, path)
    out = run(
        "import sys, modulekit\n"
        f"t = modulekit.load({str(path)!r})['w']\n"
        "print(t.dtype, t.numpy().astype('float32').tolist())"
    )
    assert out == "modulekit.bfloat16 [1.0, -2.0]"


def test_lazy_top_level_names_resolve():
    out = run(
        "import modulekit\n"
        "from modulekit import CheckpointError, load, save, profile\n"
        "print(modulekit.load is load, issubclass(CheckpointError, ValueError),\n"
        "      sorted(set(modulekit.__all__) - set(dir(modulekit))))"
    )
    assert out == "True True []"

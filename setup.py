"""Build script for modulekit's Cython extensions and C kernels.

OpenMP is detected with a compile-and-link probe: without it the extensions still build and
run serially (``modulekit._ext._openmp_helpers.openmp_enabled()`` says which). The flags are
portable (``-O3`` and no ``-march`` flag): instruction-set specific kernels carry
``__attribute__((target(...)))`` and are chosen at run time from the CPU's flags.
"""

import glob
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
EXT = os.path.join("src", "modulekit", "_ext")
KERNELS = os.path.join(EXT, "kernels")

# Each extension: its .pyx and the C kernel sources (globs, relative to the repo) it links.
EXTENSIONS = {
    "_openmp_helpers": [],
    "_isa": [os.path.join(KERNELS, "isa.c")],
    "_tensor": [],
    "_cast": [os.path.join(KERNELS, "cast", "*.c")],
    "_gemm": [os.path.join(KERNELS, "gemm", "*.c")],
    "_conv": [os.path.join(KERNELS, "conv", "*.c")],
    "_ops": [os.path.join(KERNELS, "ops", "*.c")],
    "_arena": [os.path.join(KERNELS, "arena", "*.c")],
    "_guard": [],
}


def _probe_openmp():
    """Return the OpenMP compile/link flags if a probe program builds and runs, else None."""
    if os.environ.get("MODULEKIT_NO_OPENMP"):
        return None
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    cc = cc.split()
    flags = ["-fopenmp"]
    code = (
        "#include <omp.h>\n#include <stdio.h>\n"
        "int main(void){int n=0;\n#pragma omp parallel reduction(+:n)\nn+=1;\n"
        "printf(\"%d\\n\", n>0); return 0;}\n"
    )
    tmp = tempfile.mkdtemp()
    try:
        src = os.path.join(tmp, "probe.c")
        exe = os.path.join(tmp, "probe")
        with open(src, "w") as f:
            f.write(code)
        subprocess.run(cc + flags + [src, "-o", exe], check=True, capture_output=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
        return flags if out.strip() == "1" else None
    except (OSError, subprocess.CalledProcessError):
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _extensions():
    omp = _probe_openmp()
    if omp is None:
        print("modulekit: OpenMP not available: building serial kernels", file=sys.stderr)
    else:
        print(f"modulekit: building with OpenMP ({' '.join(omp)})", file=sys.stderr)
    cflags = ["-O3", "-std=gnu11", "-fno-strict-aliasing", "-Wall", "-Wno-unused-function"]
    if sys.platform != "win32":
        cflags += ["-fvisibility=hidden"]
    exts = []
    for name, patterns in EXTENSIONS.items():
        pyx = os.path.join(EXT, name + ".pyx")
        if not os.path.exists(os.path.join(HERE, pyx)):
            continue
        sources = [pyx]
        for pat in patterns:
            sources += sorted(
                os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, pat))
            )
        exts.append(
            Extension(
                "modulekit._ext." + name,
                sources=sources,
                include_dirs=[np.get_include(), KERNELS],
                define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_25_API_VERSION")],
                extra_compile_args=cflags + (omp or []),
                extra_link_args=omp or [],
            )
        )
    return cythonize(
        exts,
        compiler_directives={
            "language_level": 3,
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
            "embedsignature": True,
        },
        compile_time_env={"MODULEKIT_OPENMP": omp is not None},
    )


setup(ext_modules=_extensions())

"""What machine and libraries a bench run measured."""

from __future__ import annotations

import importlib.metadata
import os
import platform

import modulekit as mk
from modulekit._ext import _isa

_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16",
          "avx512_vnni", "amx_tile")
_PEERS = ("numpy", "torch", "onnxruntime", "ml_dtypes", "safetensors", "scikit-learn",
          "transformers", "threadpoolctl")


def _cpu():
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model in ("", platform.machine()):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    return model, [f for f in _FLAGS if f in flags]


def _version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info():
    cpu, flags = _cpu()
    try:
        from threadpoolctl import threadpool_info

        pools = [{k: p.get(k) for k in ("internal_api", "version", "num_threads",
                                        "architecture", "filepath")}
                 for p in threadpool_info()]
    except Exception as exc:  # noqa: BLE001 - informational only
        pools = [{"error": str(exc)}]
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cpu_flags": flags,
        "isa": _isa.get_isa(),
        "isa_available": list(_isa.available_isas()),
        "threads": mk.get_num_threads(),
        "openmp": mk.threads.openmp_enabled(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": {"modulekit": mk.__version__, **{p: _version(p) for p in _PEERS}},
        "thread_pools": pools,
        "openblas_env_unset": bool(os.environ.get("MODULEKIT_BENCH_OPENBLAS_UNSET")),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(default)"),
    }

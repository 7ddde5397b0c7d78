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
    """The CPU's model name, its (vendor, family, model) from /proc/cpuinfo (None where it
    has none: the model name alone does not tell Zen 4 from Zen 5, or one Xeon from the
    next), and the flags of _FLAGS it has."""
    model, flags, ident = platform.processor() or platform.machine(), set(), {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name" and model in ("", platform.machine()):
                    model = value
                elif key in ("vendor_id", "cpu family", "model"):
                    ident.setdefault(key, value)
                elif key == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    family = (ident["vendor_id"], int(ident["cpu family"]), int(ident["model"])) if len(
        ident) == 3 else None
    return model, family, [f for f in _FLAGS if f in flags]


def _caches():
    """Per-core data caches and the last level, in KiB, as the kernels' blocking sees them
    (``_isa.cpu_caches``: Linux sysfs, else ``sysconf``)."""
    names = {"l1d": "L1d", "l2": "L2", "l3": "L3"}
    return {names[k]: v >> 10 for k, v in _isa.cpu_caches().items()}


def _version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info():
    cpu, family, flags = _cpu()
    try:
        from threadpoolctl import threadpool_info

        pools = [{k: p.get(k) for k in ("internal_api", "version", "num_threads",
                                        "architecture", "filepath")}
                 for p in threadpool_info()]
    except Exception as exc:  # noqa: BLE001 - informational only
        pools = [{"error": str(exc)}]
    return {
        "cpu": cpu,
        "cpu_family": list(family) if family else None,
        "caches_kib": _caches(),
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

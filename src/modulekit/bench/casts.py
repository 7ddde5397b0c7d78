"""Throughput of modulekit's dtype casts against NumPy's and ml_dtypes' casts.

Run: ``python -m modulekit.bench casts`` or ``python bench/casts.py [--quick] [--threshold]``.

float32 -> float16, float32 -> bfloat16 of 64 MiB of float32, and the same element count
float16 -> float32, bfloat16 -> float32, each timed against its peer in one run, round by
round in turn (``modulekit.bench._timing.interleaved``; medians, quartiles and the fastest
sample):

- "new array": ``modulekit._ext._cast.cast(x, dtype)`` vs ``x.astype(dtype)`` (NumPy's own
  cast for float16, ml_dtypes' for bfloat16). Both allocate the result, so both pay the
  kernel's first-touch page faults on it;
- "into an existing array": ``cast_into(x, out)`` vs ``np.copyto(out, x, casting="unsafe")``
  (the same peer casts, no allocation);
- "in place" (narrowing only; no peer): ``cast_into`` into a view of the source's own memory,
  what ``Tensor._cast_`` / ``Module.to(dtype)`` do. The source values are restored, untimed,
  before every call.

Two floors, which convert nothing, bound what any cast can reach on this machine: "allocate
and write the output only" (``np.full`` of as many bytes as the output: a fresh array's page
faults and writes) beside the new-array case, and "memcpy of the same byte count"
(``np.copyto`` of bytes, as many read and written as the cast moves) beside the into-existing
case. A peer's time over a floor's is the largest speedup over that peer the memory allows.

GB/s counts the bytes read plus the bytes written; speedup = peer time / modulekit time.
Targets: float32 -> float16 >= 20x ``astype``, float32 -> bfloat16 >= 10x ml_dtypes; every
new-array cast within 1.5x of its "allocate and write" floor.
``run(quick=False)`` returns the rows (``suite``, ``case``, ``impl``, ``seconds``, ``low``,
``high``, ``best``, ``gbps``) in the format of ``modulekit.bench``.

``--threshold`` times the serial and the parallel path at growing sizes: the data behind
``MK_CAST_PARALLEL_MIN_BYTES`` in ``modulekit/_ext/kernels/cast/cast-config.c``.
"""

from __future__ import annotations

import argparse

import ml_dtypes
import numpy as np

from modulekit._ext import _cast, _isa, _openmp_helpers
from modulekit.bench._timing import interleaved

MIB = 1 << 20
F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
CASES = [(F32, F16), (F32, BF16), (F16, F32), (BF16, F32)]
FLOOR_NEW = "floor: allocate and write the output only"
FLOOR_COPY = "floor: memcpy of the same byte count"


def _fmt(seconds):
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    return f"{seconds * 1e3:.2f} ms"


def run(quick=False, nbytes=64 * MIB) -> list[dict]:
    """Time the casts of ``nbytes`` of float32 (or as many elements from 16 bits) against
    their peers; print a table and return its rows."""
    n = nbytes // 4
    rounds = 3 if quick else 11
    base = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    copy_src = base.view(np.uint8)
    copy_dst = np.empty_like(copy_src)
    rows = []
    for src, dst in CASES:
        x = base if src == F32 else base.astype(src)
        out = np.empty(n, dst)
        peer = "numpy" if BF16 not in (src, dst) else "ml_dtypes"
        moved = n * (src.itemsize + dst.itemsize)
        name = f"{src.name} -> {dst.name} {nbytes // MIB} MiB"
        groups = {
            f"{name}, new array": {
                "modulekit": lambda x=x, dst=dst: _cast.cast(x, dst),
                f"{peer} astype": lambda x=x, dst=dst: x.astype(dst),
                FLOOR_NEW: lambda nb=n * dst.itemsize: np.full(nb, 1, np.uint8),
            },
            f"{name}, into an existing array": {
                "modulekit": lambda x=x, out=out: _cast.cast_into(x, out),
                f"{peer} np.copyto": lambda x=x, out=out: np.copyto(out, x, casting="unsafe"),
                FLOOR_COPY: lambda a=copy_src[: moved // 2], b=copy_dst[: moved // 2]:
                    np.copyto(b, a),
            },
        }
        setups = {}
        if dst.itemsize < src.itemsize:
            buf = np.empty_like(x)
            view = buf.view(np.uint8)[: n * dst.itemsize].view(dst)
            groups[f"{name}, in place"] = {
                "modulekit": lambda buf=buf, view=view: _cast.cast_into(buf, view)}
            # the source values are restored, untimed, before every call
            setups[f"{name}, in place"] = {"modulekit": lambda buf=buf, x=x: np.copyto(buf, x)}
        for case, funcs in groups.items():
            res = interleaved(funcs, rounds=rounds, number=1, setup=setups.get(case))
            for impl, stats in res.items():
                nb = n * dst.itemsize if impl == FLOOR_NEW else moved
                rows.append(dict(suite="casts", case=case, impl=impl,
                                 gbps=nb / stats["seconds"] / 1e9, **stats))
    return rows


def _print(rows, nbytes):
    ours = {r["case"]: r for r in rows if r["impl"] == "modulekit"}
    print(f"\n## dtype casts, {nbytes // MIB} MiB of float32, ISA {_isa.get_isa()}, "
          f"{_openmp_helpers.get_num_threads()} threads (GB/s: read + written; speedup: "
          f"peer / modulekit, medians and fastest samples)")
    header = ("case", "impl", "median", "spread", "best", "GB/s", "speedup", "best/best")
    lines = []
    for r in rows:
        mine = ours[r["case"]]
        mine_peer = r is not mine
        lines.append((
            r["case"], r["impl"], _fmt(r["seconds"]), f"{_fmt(r['low'])}..{_fmt(r['high'])}",
            _fmt(r["best"]), f"{r['gbps']:.1f}",
            f"{r['seconds'] / mine['seconds']:.1f}x" if mine_peer else "",
            f"{r['best'] / mine['best']:.1f}x" if mine_peer else "",
        ))
    widths = [max(len(h), *(len(ln[i]) for ln in lines)) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for ln in lines:
        print("  ".join(c.ljust(w) for c, w in zip(ln, widths)), flush=True)


def threshold(quick=False) -> list[dict]:
    """Time float32 -> float16 ``cast_into`` serial and on every thread, size by size."""
    nthreads = _openmp_helpers.get_num_threads()
    previous = _cast.set_parallel_min_bytes(0)     # let the parallel path run at any size
    rows = []
    try:
        for kib in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096):
            n = kib * 1024 // 6                    # 4 bytes read + 2 written per element
            x = np.ones(n, np.float32)
            out = np.empty(n, np.float16)
            funcs = {"serial": lambda x=x, out=out: _cast.cast_into(x, out),
                     "parallel": lambda x=x, out=out: _cast.cast_into(x, out)}
            setup = {"serial": lambda: _openmp_helpers.set_num_threads(1),
                     "parallel": lambda: _openmp_helpers.set_num_threads(nthreads)}
            number = max(20, (200 if quick else 2000) * 16 // kib)
            res = interleaved(funcs, rounds=3 if quick else 9, number=number, setup=setup)
            rows.append({"work_bytes": kib * 1024, "serial": res["serial"]["seconds"],
                         "parallel": res["parallel"]["seconds"]})
    finally:
        _cast.set_parallel_min_bytes(previous)
        _openmp_helpers.reset_num_threads()
    print(f"\n## float32 -> float16 cast_into, 1 vs {nthreads} threads (work = bytes read + "
          f"written; the compiled threshold is {previous // 1024} KiB)")
    print(f"{'work':>9}  {'1 thread':>10}  {f'{nthreads} threads':>10}  speedup")
    for r in rows:
        print(f"{r['work_bytes'] // 1024:>5} KiB  {_fmt(r['serial']):>10}  "
              f"{_fmt(r['parallel']):>10}  {r['serial'] / r['parallel']:.2f}x")
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument("--threshold", action="store_true",
                        help="measure 1 thread vs all threads by size instead")
    args = parser.parse_args(argv)
    if args.threshold:
        threshold(args.quick)
    else:
        _print(run(args.quick), 64 * MIB)


if __name__ == "__main__":
    main()

"""Checkpoint load benchmark: modulekit.load against the reference loaders, per format.

For a ~200 MB state dict of float32 tensors (8 MB with ``quick=True``) written as
safetensors, a ``torch.save`` zip archive and an ``.npz``, each loader runs in a fresh
subprocess (so peak RSS is its own), ``repeats`` times, on a warm page cache:

* ``load_s``: the load call alone;
* ``first_use_s``: the load plus touching every tensor once (one element per 4 KiB page, the
  same work for every loader), i.e. the time until all the weights are really in memory;
* ``peak_rss_mb``: peak resident memory of the process minus its resident memory just
  before loading (the interpreter and imports are not counted). Pages of a memory-mapped
  file that were touched count here although they are the shared page cache, so
* ``anon_mb``: private (anonymous) memory the loaded tensors hold after first use, the
  memory really added; a memory map's touched pages are file pages, not counted here.

Loaders: ``modulekit`` (mmap and ``mmap=False``), ``safetensors.numpy.load_file``,
``torch.load(weights_only=True)`` (and with ``mmap=True``), ``numpy.load``. Reference loaders
whose package is missing are skipped. Run ``python bench/checkpoint_io.py [--quick]``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from modulekit.bench._timing import summary

# (name, format, what the child runs)
LOADERS = [
    ("modulekit.load", "safetensors", "mk"),
    ("modulekit.load(mmap=False)", "safetensors", "mk_nommap"),
    ("safetensors.numpy.load_file", "safetensors", "st_numpy"),
    ("modulekit.load", "pt-zip", "mk"),
    ("torch.load(weights_only=True)", "pt-zip", "torch"),
    ("torch.load(weights_only=True, mmap=True)", "pt-zip", "torch_mmap"),
    ("modulekit.load", "npz", "mk"),
    ("numpy.load", "npz", "np_load"),
]
# the reference each modulekit row is compared with
REFERENCE = {"safetensors": "st_numpy", "pt-zip": "torch", "npz": "np_load"}


def _child(kind, path):
    """Run one loader in this (fresh) process; print a JSON line with the measurements."""
    import numpy as np

    def status_kb(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise RuntimeError(f"no {field} in /proc/self/status")

    if kind in ("mk", "mk_nommap"):
        from modulekit.checkpoint import load

        def loader():
            return load(path, mmap=(kind == "mk"))

        def arrays(d):
            return [t.numpy() for t in d.values()]
    elif kind == "st_numpy":
        from safetensors.numpy import load_file

        def loader():
            return load_file(path)

        def arrays(d):
            return list(d.values())
    elif kind in ("torch", "torch_mmap"):
        import torch

        def loader():
            return torch.load(path, weights_only=True, mmap=(kind == "torch_mmap"))

        def arrays(d):
            return [t.numpy() for t in d.values()]
    elif kind == "np_load":
        def loader():
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}

        def arrays(d):
            return list(d.values())
    else:
        raise SystemExit(f"unknown loader {kind}")

    # Reset the peak-RSS mark (ru_maxrss would carry the parent's peak over fork/exec).
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = status_kb("VmRSS")
    base_anon = status_kb("RssAnon")
    t0 = time.perf_counter()
    state = loader()
    t1 = time.perf_counter()
    total = 0.0
    for a in arrays(state):
        flat = a.reshape(-1)
        step = max(1, 4096 // a.itemsize)
        total += float(flat[::step].sum())  # one element per page: every page is touched
    t2 = time.perf_counter()
    print(json.dumps({"load_s": t1 - t0, "first_use_s": t2 - t0,
                      "peak_rss_mb": (status_kb("VmHWM") - base) / 1024,
                      "anon_mb": (status_kb("RssAnon") - base_anon) / 1024,
                      "checksum": total, "tensors": len(state)}))


def _write_files(directory, total_mb):
    import numpy as np

    from modulekit.checkpoint import save

    rng = np.random.default_rng(0)
    state = {}
    size = 0
    i = 0
    shapes = [(1024, 1024), (4096, 256), (1024,), (3072, 768), (768,), (512, 512, 3)]
    while size < total_mb * 2**20:
        shape = shapes[i % len(shapes)]
        arr = rng.standard_normal(shape, dtype=np.float32)
        state[f"layers.{i // len(shapes)}.p{i % len(shapes)}"] = arr
        size += arr.nbytes
        i += 1
    paths = {"safetensors": os.path.join(directory, "model.safetensors"),
             "pt-zip": os.path.join(directory, "model.pt"),
             "npz": os.path.join(directory, "model.npz")}
    save(state, paths["safetensors"])
    np.savez(paths["npz"], **state)
    try:
        import torch

        torch.save({k: torch.from_numpy(v) for k, v in state.items()}, paths["pt-zip"])
    except ImportError:
        del paths["pt-zip"]
    n = len(state)
    state.clear()
    return paths, size, n


def _run_child(kind, path):
    proc = subprocess.run(
        [sys.executable, "-m", "modulekit.bench.checkpoint_io", "--child", kind, path],
        capture_output=True, text=True,
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": last}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(quick=False) -> list[dict]:
    """Run every loader on every format; return one dict per (loader, format).

    Each dict: ``loader``, ``format``, ``file_mb``, ``load_s``, ``first_use_s`` (medians over
    the repeats; ``seconds``, ``low``, ``high``, ``best``: the statistics of ``first_use_s``,
    as every bench row has them), ``peak_rss_mb`` (max over the repeats) and, for modulekit
    rows, the
    ``speedup_load`` / ``speedup_first_use`` / ``rss_ratio`` against the format's reference
    loader (reference time / modulekit time; modulekit RSS / reference RSS). Rows for a
    missing package carry ``error`` instead.
    """
    total_mb = 8 if quick else 200
    repeats = 1 if quick else 3
    rows = []
    with tempfile.TemporaryDirectory(prefix="mk-ckpt-bench-") as d:
        paths, nbytes, ntensors = _write_files(d, total_mb)
        for name, fmt, kind in LOADERS:
            if fmt not in paths:
                continue
            path = paths[fmt]
            _run_child(kind, path)  # warm the page cache and the imports
            results = [_run_child(kind, path) for _ in range(repeats)]
            impl = "modulekit" if kind == "mk" else name
            row = {"suite": "checkpoint_io", "case": f"load {fmt} {total_mb} MB, to first use",
                   "impl": impl, "loader": name, "format": fmt, "kind": kind,
                   "file_mb": os.path.getsize(path) / 2**20, "tensors": ntensors}
            errors = [r["error"] for r in results if "error" in r]
            if errors:
                row["error"] = errors[0]
            else:
                row["load_s"] = statistics.median(r["load_s"] for r in results)
                row.update(summary([r["first_use_s"] for r in results]))
                row["first_use_s"] = row["seconds"]
                row["peak_rss_mb"] = max(r["peak_rss_mb"] for r in results)
                row["anon_mb"] = max(r["anon_mb"] for r in results)
            rows.append(row)
    by = {(r["format"], r["kind"]): r for r in rows}
    for r in rows:
        ref = by.get((r["format"], REFERENCE[r["format"]]))
        if r["kind"] == "mk" and ref and "error" not in ref and "error" not in r:
            r["reference"] = ref["loader"]
            r["speedup_load"] = ref["load_s"] / r["load_s"]
            r["speedup_first_use"] = ref["first_use_s"] / r["first_use_s"]
            r["rss_ratio"] = r["peak_rss_mb"] / max(ref["peak_rss_mb"], 1e-9)
    return rows


def _print(rows):
    print(f"{'format':12s} {'loader':42s} {'file MB':>8s} {'load ms':>9s} {'first use ms':>13s} "
          f"{'peak RSS MB':>12s} {'anon MB':>8s}")
    for r in rows:
        if "error" in r:
            print(f"{r['format']:12s} {r['loader']:42s} skipped: {r['error']}")
            continue
        print(f"{r['format']:12s} {r['loader']:42s} {r['file_mb']:8.1f} "
              f"{r['load_s'] * 1e3:9.2f} {r['first_use_s'] * 1e3:13.2f} {r['peak_rss_mb']:12.1f} "
              f"{r['anon_mb']:8.1f}")
    print()
    for r in rows:
        if "speedup_first_use" in r:
            print(f"{r['format']:12s} modulekit vs {r['reference']}: load "
                  f"{r['speedup_load']:.1f}x faster, to first use {r['speedup_first_use']:.1f}x "
                  f"faster, peak RSS {r['rss_ratio']:.2f}x")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 3 and argv[0] == "--child":
        _child(argv[1], argv[2])
    else:
        _print(run(quick="--quick" in argv))


if __name__ == "__main__":
    main()

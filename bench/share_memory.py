"""Memory of N worker processes serving one BERT-base model, shared or not:
`python bench/share_memory.py [--quick] [--workers 4] [--start-method spawn] [--json PATH]`.

The parent builds ``BertModel`` with BERT-base's configuration and random weights (about 110M
float32 parameters, 440 MB), packs it (``initialize()``), and, in the "shared" run, calls
``share_memory()``. It then starts workers one at a time with the given ``multiprocessing``
start method; each receives the model pickled through a pipe (the way a ``Pool`` or Dask
sends it), runs one forward (batch 1, 128 tokens), drops the pickle and reports. After each
worker is ready the parent reads ``/proc/PID/smaps_rollup`` of itself and of every live
worker: the sum of PSS over these processes is the memory they take from the machine (a page
mapped by k of them counts 1/k in each), so the step from k-1 to k workers is what worker k
adds. Also printed: each worker's USS (its private pages), MemAvailable's drop, and the USS
of a "bare" worker (same start method, modulekit imported, no model), the interpreter's own
floor that any worker adds. The "private" run sends the model the ordinary way (raw weights;
each worker unpickles and re-packs its own copy). Linux only (``/proc``). ``--quick`` uses a
2-layer, 256-wide model.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import pickle
import sys
import time

import numpy as np


def _rollup(pid: int) -> dict:
    """``Rss``, ``Pss`` and ``Uss`` (private clean + dirty) of a process, in bytes."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[-1] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return {
        "rss": fields.get("Rss", 0),
        "pss": fields.get("Pss", 0),
        "uss": fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0),
    }


def _mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _worker(conn, tokens: int) -> None:
    """Receive a pickled model (or b"" for a bare worker), run one forward, report, wait."""
    import modulekit  # noqa: F401  (the floor of a bare worker includes the import)

    payload = conn.recv_bytes()
    model = None
    if payload:
        model = pickle.loads(payload)
        del payload
        ids = np.arange(tokens, dtype=np.int64).reshape(1, tokens) % 1000
        model(ids)
    gc.collect()
    conn.send("ready")
    conn.recv()  # "stop"
    del model


def _config(quick: bool):
    from modulekit.models.bert import BertConfig

    if quick:
        return BertConfig(hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=1024)
    return BertConfig()  # BERT-base: 12 layers, 768 wide, 30522-token vocabulary


def _run(mode: str, n_workers: int, method: str, quick: bool, tokens: int) -> dict:
    from modulekit.models.bert import BertModel

    model = BertModel(_config(quick)).eval().initialize()
    # (a stacked query/key/value kernel counts once: its views' shares add up to its size)
    weight_bytes = sum(t.nbytes for t in model.parameters()) + sum(
        m._packed.nbytes for m in model.modules() if getattr(m, "_packed", None) is not None
    )
    if mode == "shared":
        model.share_memory()
    payload = b"" if mode == "bare" else pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL)
    gc.collect()
    ctx = mp.get_context(method)
    procs, conns, steps = [], [], []
    me = os.getpid()
    try:
        before = sum(_rollup(p)["pss"] for p in [me])
        avail0 = _mem_available()
        for k in range(1, n_workers + 1):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, tokens), daemon=True)
            proc.start()
            parent.send_bytes(payload)
            if parent.recv() != "ready":  # pragma: no cover
                raise RuntimeError("worker failed")
            procs.append(proc)
            conns.append(parent)
            time.sleep(0.2)
            rolls = [_rollup(p.pid) for p in procs]
            total = _rollup(me)["pss"] + sum(r["pss"] for r in rolls)
            steps.append({
                "workers": k,
                "total_pss": total,
                "worker_uss": rolls[-1]["uss"],
                "worker_pss": rolls[-1]["pss"],
                "worker_rss": rolls[-1]["rss"],
                "mem_available_drop": avail0 - _mem_available(),
            })
    finally:
        for c in conns:
            c.send("stop")
        for p in procs:
            p.join(30)
    prev = before
    for s in steps:
        s["added_pss"] = s["total_pss"] - prev
        prev = s["total_pss"]
    return {"mode": mode, "start_method": method, "payload_bytes": len(payload),
            "weight_bytes": int(weight_bytes), "steps": steps}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--start-method", default="spawn", choices=mp.get_all_start_methods())
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--modes", default="bare,shared,private")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if not os.path.exists("/proc/self/smaps_rollup"):
        print("needs Linux /proc/PID/smaps_rollup", file=sys.stderr)
        return 1
    mb = 1 / 2**20
    results = []
    for mode in args.modes.split(","):
        r = _run(mode, args.workers, args.start_method, args.quick, args.tokens)
        results.append(r)
        print(f"\n{mode} ({args.start_method}; model weights {r['weight_bytes'] * mb:.0f} MiB, "
              f"pickle {r['payload_bytes'] * mb:.1f} MiB)")
        print(" workers  total PSS  added PSS  worker USS  worker RSS  MemAvailable drop (MiB)")
        for s in r["steps"]:
            share = 100 * s["added_pss"] / r["weight_bytes"]
            print(f" {s['workers']:7d} {s['total_pss'] * mb:9.0f}M {s['added_pss'] * mb:8.1f}M "
                  f"{s['worker_uss'] * mb:10.1f}M {s['worker_rss'] * mb:10.1f}M "
                  f"{s['mem_available_drop'] * mb:10.0f}M   (added = {share:.1f}% of weights)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

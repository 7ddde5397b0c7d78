"""Models called the way applications call them: beside other thread pools, after idle gaps,
and serving requests that arrive at random.

``python -m modulekit.bench application [--quick]`` (or ``python bench/application.py``).
Three models at batch 1: ResNet-18 and MobileNetV2 at 224x224 (``modulekit.bench.models``)
and a MiniLM-L6-sized BERT at sequence 128 (``modulekit.bench.bert``), each run by modulekit,
torch and onnxruntime in the same process, with the same inputs and weights (checked to agree
before anything is timed). Three kinds of case:

``<model> after a NumPy matmul`` / ``after an onnxruntime call``
    every timed call follows, untimed, a NumPy matmul 1024^3 (OpenBLAS's workers spin after
    it) or a call of another onnxruntime session made with default settings (its pool spins
    too): what a process with pre-processing or a second runtime does. The row ``modulekit
    alone`` is modulekit's steady latency with the machine to itself, so its "speedup" is
    the slowdown the other pool causes (target: within 1.15x).
``<model> first call after <gap> idle``
    each timed call follows ``gap`` seconds of sleep (the pools park, the caches cool); the
    row ``modulekit steady`` is the back-to-back latency.
``<model> serving p50|p99, idle|other core busy``
    requests arrive as a Poisson process (mean interval twice the slowest library's steady
    latency; the same arrival times for every library); each is served when it arrives or
    when the one before it is done, and its latency is completion minus arrival (queueing
    included). ``seconds`` is the median over repetitions of the percentile, ``low``/``high``
    the smallest and largest. "other core busy": another process spins on one core meanwhile.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import time

import numpy as np

from modulekit.bench._timing import interleaved, summary
from modulekit.bench.conv import PAUSE

SUITE = "application"
GAPS = (0.05, 0.2)  # idle gaps, seconds


def _cnn(name, rng):
    import torch

    from modulekit.bench.models import setup

    model, tmodel, sess = setup(name)
    x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    xt = torch.from_numpy(x)
    err = float(np.abs(model(x) - tmodel(xt).numpy()).max())
    if err > 1e-3:
        raise AssertionError(f"{name}: modulekit and torch disagree by {err}")
    funcs = {"modulekit": lambda: model(x), "torch": lambda: tmodel(xt)}
    if sess is not None:
        funcs["onnxruntime"] = lambda: sess.run(None, {"x": x})
    return f"{name} batch 1", funcs, sess


def _bert(tmp, rng):
    import torch

    from modulekit.bench.bert import CONFIG, setup

    model, hf, sess, _ = setup(tmp)
    seq = 128
    ids = rng.integers(1000, CONFIG["vocab_size"], (1, seq))
    mask, tt = np.ones((1, seq), np.int64), np.zeros((1, seq), np.int64)
    tkw = {k: torch.from_numpy(v) for k, v in
           (("input_ids", ids), ("attention_mask", mask), ("token_type_ids", tt))}
    err = float(np.abs(model(ids, mask, tt).last_hidden_state
                       - hf(**tkw).last_hidden_state.numpy()).max())
    if err > 1e-3:
        raise AssertionError(f"MiniLM: modulekit and transformers disagree by {err}")
    funcs = {"modulekit": lambda: model(ids, mask, tt), "torch": lambda: hf(**tkw)}
    if sess is not None:
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": tt}
        funcs["onnxruntime"] = lambda: sess.run(None, feed)
    return f"MiniLM-L6 batch 1 seq {seq}", funcs, sess


def _rows(case, results, **extra):
    return [dict(suite=SUITE, case=case, impl=impl, **extra, **stats)
            for impl, stats in results.items()]


def _beside_pools(case, funcs, other_session, quick):
    """Each call after a NumPy matmul / another onnxruntime session's call; and alone."""
    rounds = 4 if quick else 25
    a = np.random.default_rng(1).standard_normal((1024, 1024)).astype(np.float32)
    others = {"a NumPy matmul": lambda: a @ a}
    if other_session is not None:
        sess, feed = other_session
        others["an onnxruntime call"] = lambda: sess.run(None, feed)
    alone = interleaved({"modulekit alone": funcs["modulekit"]}, rounds=rounds, number=3,
                        pause=PAUSE, wait_idle=True)
    rows = []
    for label, other in others.items():
        res = interleaved(funcs, rounds=rounds, number=1,
                          setup={impl: other for impl in funcs})
        rows += _rows(f"{case} after {label}", {**res, **alone})
    return rows


def _after_idle(case, funcs, quick):
    rounds = 3 if quick else 12
    steady = interleaved({"modulekit steady": funcs["modulekit"]}, rounds=rounds, number=3,
                         pause=PAUSE, wait_idle=True)
    rows = []
    for gap in GAPS:
        res = interleaved(funcs, rounds=rounds, number=1,
                          setup={impl: (lambda g=gap: time.sleep(g)) for impl in funcs})
        rows += _rows(f"{case} first call after {gap * 1000:.0f} ms idle", {**res, **steady})
    return rows


def _serve(fn, arrivals) -> np.ndarray:
    """Serve one request at each arrival time (seconds from the start), in order, as soon as
    it has arrived and the previous one is done; the latencies (completion - arrival)."""
    latencies = np.empty(len(arrivals))
    start = time.perf_counter()
    for i, t in enumerate(arrivals):
        wait = t - (time.perf_counter() - start)
        if wait > 0:
            time.sleep(wait)
        fn()
        latencies[i] = time.perf_counter() - start - t
    return latencies


@contextlib.contextmanager
def _busy_core():
    """Another process keeping one core busy (a pure-Python spin) while the block runs."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # scheduled and spinning
        yield
    finally:
        proc.kill()
        proc.wait()


def _serving(case, funcs, quick, rng):
    """p50 and p99 latency under Poisson arrivals, idle and with the other core busy."""
    steady = interleaved(funcs, rounds=3, number=3, pause=PAUSE, wait_idle=True)
    interval = 2.0 * max(s["seconds"] for s in steady.values())
    requests, reps = (12, 1) if quick else (150, 3)
    rows = []
    for condition, ctx in (("idle", contextlib.nullcontext), ("other core busy", _busy_core)):
        p50 = {impl: [] for impl in funcs}
        p99 = {impl: [] for impl in funcs}
        with ctx():
            for r in range(reps):
                arrivals = np.cumsum(rng.exponential(interval, requests))
                names = list(funcs)
                for impl in names[r % len(names):] + names[:r % len(names)]:
                    time.sleep(PAUSE)
                    lat = _serve(funcs[impl], arrivals)
                    p50[impl].append(float(np.percentile(lat, 50)))
                    p99[impl].append(float(np.percentile(lat, 99)))
        for label, values in (("p50", p50), ("p99", p99)):
            stats = {impl: dict(summary(v), low=min(v), high=max(v))
                     for impl, v in values.items()}
            rows += _rows(f"{case} serving {label}, {condition}", stats,
                          mean_interval=interval, requests=requests)
    return rows


def run(quick=False):
    """Every case above for the three models; returns the bench rows."""
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        resnet = _cnn("ResNet-18", rng)
        mobilenet = _cnn("MobileNetV2", rng)
        bert = _bert(tmp, rng)
        x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
        for case, funcs, _ in (resnet, mobilenet, bert):
            # another onnxruntime session: MobileNetV2's, or ResNet-18's beside MobileNetV2
            other = (resnet if case.startswith("MobileNetV2") else mobilenet)[2]
            other = (other, {"x": x}) if other is not None else None
            rows += _beside_pools(case, funcs, other, quick)
            rows += _after_idle(case, funcs, quick)
            rows += _serving(case, funcs, quick, rng)
    return rows


def main(argv=None):
    from modulekit.bench.__main__ import main as bench_main

    return bench_main(["application", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()

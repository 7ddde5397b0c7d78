"""What ``import modulekit`` adds over ``import numpy``: ``python bench/import_time.py [-n N]``.

Each sample is a fresh interpreter that times its own import with ``time.perf_counter``
(wall) and ``time.process_time`` (CPU: less inflated on a machine shared with other work),
interpreter start-up excluded, alternating ``import numpy`` and ``import modulekit``
(which imports numpy too). Prints the medians and their difference, the figure the bar
"``import modulekit`` adds at most 100 ms over ``import numpy``" is about. Run from a clone
with ``PYTHONPATH=src`` or against an installed modulekit. To see where the time goes:
``python -X importtime -c "import modulekit" 2>&1 | sort -t'|' -k2 -n | tail``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

_CODE = ("import time; t, c = time.perf_counter(), time.process_time(); import {}; "
         "print(time.perf_counter() - t, time.process_time() - c)")


def sample(module: str) -> tuple[float, float]:
    """(wall, CPU) seconds one fresh interpreter takes to import ``module``."""
    out = subprocess.run(
        [sys.executable, "-c", _CODE.format(module)], check=True, capture_output=True, text=True
    )
    wall, cpu = out.stdout.split()[-2:]
    return float(wall), float(cpu)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10, help="fresh processes per module (10)")
    args = parser.parse_args(argv)
    times = {"numpy": [], "modulekit": []}
    for _ in range(args.n):
        for module in times:
            times[module].append(sample(module))
    for i, kind in enumerate(("wall", "CPU")):
        med = {m: statistics.median(s[i] for s in t) for m, t in times.items()}
        for m, t in times.items():
            v = [s[i] for s in t]
            print(f"{kind:<4} import {m:<10} median {med[m] * 1e3:7.1f} ms  "
                  f"(min {min(v) * 1e3:.1f}, max {max(v) * 1e3:.1f}, n={len(v)})")
        print(f"{kind:<4} modulekit adds {(med['modulekit'] - med['numpy']) * 1e3:.1f} ms over "
              "numpy (bar, wall: <= 100 ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

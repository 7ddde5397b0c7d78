"""Write docs/performance.md from a bench run's JSON: ``python bench/make_performance_md.py
run.json --out docs/performance.md [--plot performance.png] [--notes FILE]``."""

import sys

from modulekit.bench.report import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

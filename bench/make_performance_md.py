"""Write docs/performance.md from bench runs' JSON, one per kind of machine:
``python bench/make_performance_md.py bench/results/*.json --out docs/performance.md
[--plot 'performance-{kind}.png'] [--notes FILE]`` (see ``modulekit.bench.report``)."""

import sys

from modulekit.bench.report import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

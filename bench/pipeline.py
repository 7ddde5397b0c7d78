"""Pipeline(StandardScaler, modulekit MLP) vs scikit-learn's MLPClassifier and torch:
`python bench/pipeline.py [--quick]` (``run(quick=False)`` returns the rows)."""

from modulekit.bench.__main__ import main
from modulekit.bench.pipeline import run  # noqa: F401  (the suite, for `from pipeline import run`)

if __name__ == "__main__":
    raise SystemExit(main(["pipeline", *__import__("sys").argv[1:]]))

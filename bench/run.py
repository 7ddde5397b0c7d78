"""Every bench suite in one run: ``python bench/run.py [SUITE ...] [--quick] [--json OUT]``
(the same as ``python -m modulekit.bench``)."""

import sys

from modulekit.bench.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

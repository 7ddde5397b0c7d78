"""Group / instance normalisation vs torch: `python bench/norm.py [--quick]`."""

import sys

from modulekit.bench.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(["norm", *sys.argv[1:]]))

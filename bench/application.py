"""Models beside other thread pools, after idle, serving random arrivals:
`python bench/application.py [--quick]`."""

import sys

from modulekit.bench.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(["application", *sys.argv[1:]]))

"""bfloat16 Linear ("medium") vs torch's bfloat16 Linear: ``python bench/bf16.py [--quick]``."""

import sys

from modulekit.bench.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(["bf16", *sys.argv[1:]]))

"""Convolution kernels vs torch / onnxruntime: `python bench/conv.py [--quick]`."""

import sys

from modulekit.bench.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(["conv", *sys.argv[1:]]))

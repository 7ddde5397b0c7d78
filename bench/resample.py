"""Resampling (bilinear / nearest upsampling) vs torch / onnxruntime:
`python bench/resample.py [--quick]`."""

import sys

from modulekit.bench.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(["resample", *sys.argv[1:]]))

"""GEMM engine vs NumPy/OpenBLAS, torch, onnxruntime: ``python bench/gemm.py [--quick]``."""

import sys

from modulekit.bench.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(["gemm", *sys.argv[1:]]))

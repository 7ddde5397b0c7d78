"""Convolution kernels vs torch / onnxruntime: ``python bench/conv.py [--quick] [--spin]``
(the same as ``python -m modulekit.bench.conv``; see modulekit/bench/conv.py)."""

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from modulekit.bench.conv import main, run  # noqa: E402,F401

if __name__ == "__main__":
    main()

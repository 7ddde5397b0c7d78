"""ResNet-18 / MobileNetV2 vs torch / onnxruntime: ``python bench/models.py [--quick] [--spin]``
(the same as ``python -m modulekit.bench.models``; see modulekit/bench/models.py)."""

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from modulekit.bench.models import main, run  # noqa: E402,F401

if __name__ == "__main__":
    main()

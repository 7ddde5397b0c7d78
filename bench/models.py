"""ResNet-18 / MobileNetV2 vs torch / onnxruntime: `python bench/models.py [--quick]`."""

import sys

from modulekit.bench.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(["models", *sys.argv[1:]]))

"""int8 dynamic quantization against torch's and onnxruntime's: `python bench/int8.py [--quick]`."""

import sys

from modulekit.bench.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(["int8", *sys.argv[1:]]))

"""float32 <-> float16/bfloat16 casts vs NumPy and ml_dtypes: ``python bench/casts.py [--quick]``
(``--threshold`` measures where the casts should go parallel)."""

import sys

from modulekit.bench.casts import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

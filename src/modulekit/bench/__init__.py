"""modulekit's benchmark suites and their runner: ``python -m modulekit.bench --help``.

Each suite module (``overhead``, ``casts``, ``gemm``, ``conv``, ``models``, ``bert``,
          "application", "int8", "bf16", "norm", "resample", "rnn")
timing modulekit against every installed peer (NumPy, torch, onnxruntime, ...) in one run,
interleaved, and a
``main()`` for ``python -m modulekit.bench.<suite>``; ``bench/<suite>.py`` in the source tree
runs the same thing as a plain script.
"""

SUITES = ("overhead", "casts", "gemm", "conv", "models", "bert", "checkpoint_io", "pipeline",
          "application", "int8", "bf16", "norm", "resample", "rnn")

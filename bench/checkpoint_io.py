"""Checkpoint load time and memory vs safetensors, numpy, torch: `python bench/checkpoint_io.py`."""

from modulekit.bench.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(["checkpoint_io", *__import__("sys").argv[1:]]))

"""Module call overhead vs torch, and cast throughput: ``python bench/module_overhead.py``."""

from modulekit.bench.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(["overhead", "casts", *__import__("sys").argv[1:]]))

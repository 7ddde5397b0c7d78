"""MiniLM-L6-sized BERT vs transformers and onnxruntime: `python bench/bert.py [--quick]`."""

from modulekit.bench.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(["bert", *__import__("sys").argv[1:]]))

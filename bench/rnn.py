"""Recurrent layers (LSTM, GRU) vs torch: `python bench/rnn.py [--quick]`."""

import sys

from modulekit.bench.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(["rnn", *sys.argv[1:]]))

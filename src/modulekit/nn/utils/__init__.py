"""Utilities of ``torch.nn.utils`` that inference code calls (``rnn``: packed sequences)."""

from modulekit.nn.utils import rnn

__all__ = ["rnn"]

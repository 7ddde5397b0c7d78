"""The planner's rules, one module per family, and :data:`PIPELINE`: every rule, in the order
:func:`modulekit.compile.passes.optimize` runs them.

A rule is ``rule(graph, ctx) -> int`` (how many times it fired); see
:mod:`modulekit.compile.passes` for what a rule may assume and must keep true. Each rule's
docstring says what it matches, what it builds, and whether the result is bit-identical to
the unfused steps.
"""

from modulekit.compile.rules.conv import (
    conv_activation,
    conv_bn_fold,
    conv_global_avgpool,
    conv_maxpool,
    conv_residual_add,
    depthwise_chain,
)
from modulekit.compile.rules.linear import linear_activation

#: The rules in the order they run: a rule that needs another's result comes after it.
PIPELINE = (
    linear_activation,
    # convolutional networks (rules/conv.py), in this order
    conv_bn_fold,
    conv_residual_add,
    conv_activation,
    conv_maxpool,
    conv_global_avgpool,
    depthwise_chain,
)

__all__ = ["PIPELINE"]

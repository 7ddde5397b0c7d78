"""The planner's rules, one module per family, and :data:`PIPELINE`: every rule, in the order
:func:`modulekit.compile.passes.optimize` runs them.

A rule is ``rule(graph, ctx) -> int`` (how many times it fired); see
:mod:`modulekit.compile.passes` for what a rule may assume and must keep true. Each rule's
docstring says what it matches, what it builds, and whether the result is bit-identical to
the unfused steps.
"""

from modulekit.compile.rules.linear import linear_activation

#: The rules in the order they run: a rule that needs another's result comes after it.
PIPELINE = (
    linear_activation,
)

__all__ = ["PIPELINE"]

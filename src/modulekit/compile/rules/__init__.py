"""The planner's rules, one module per family, and :data:`PIPELINE`: every rule, in the order
:func:`modulekit.compile.passes.optimize` runs them.

A rule is ``rule(graph, ctx) -> int`` (how many times it fired); see
:mod:`modulekit.compile.passes` for what a rule may assume and must keep true. Each rule's
docstring says what it matches, what it builds, and whether the result is bit-identical to
the unfused steps.
"""

from modulekit.compile.rules.attention import (
    attention,
    dropout_identity,
    embedding_layer_norm,
    layer_norm_residual,
)
from modulekit.compile.rules.conv import (
    conv_activation,
    conv_bn_fold,
    conv_global_avgpool,
    conv_maxpool,
    conv_residual_add,
    depthwise_chain,
)
from modulekit.compile.rules.linear import (
    linear_activation,
    linear_chain,
    linear_stack,
)
from modulekit.compile.rules.quantized import quantized_handoff, quantized_invres

#: The rules in the order they run: a rule that needs another's result comes after it.
PIPELINE = (
    # transformers (rules/attention.py, rules/linear.py): dropout first, so that the patterns
    # see through it; the stack before attention (which reads its column blocks in place);
    # the embeddings before layer_norm_residual (which would take their last add); the chain
    # before the single-layer activation rules
    dropout_identity,
    linear_stack,
    attention,
    embedding_layer_norm,
    layer_norm_residual,
    linear_chain,
    linear_activation,
    # convolutional networks (rules/conv.py), in this order
    conv_bn_fold,
    conv_residual_add,
    conv_activation,
    conv_maxpool,
    conv_global_avgpool,
    depthwise_chain,
    # statically quantized networks (rules/quantized.py): after the conv rules, whose steps
    # the first turns into steps handing bytes on; the blocks of those steps after it
    quantized_handoff,
    quantized_invres,
)

__all__ = ["PIPELINE"]

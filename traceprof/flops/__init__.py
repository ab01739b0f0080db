"""FLOPs, MACs and bytes of ops, computed from their recorded shapes.

Traces carry no FLOPs (``with_flops=True`` writes none into the JSON): traceprof computes them
from each op's ``Input Dims``, ``Input type`` and ``Concrete Inputs`` with a registry of formulas,
one per op or op family (docs/flops.md).

- :mod:`.registry`: the :class:`Registry` type and op families;
- :mod:`.shapes`: decoded op arguments and the cost record;
- :mod:`.matmul`, :mod:`.conv`, :mod:`.attention`, :mod:`.norm`, :mod:`.pointwise`,
  :mod:`.reduction`, :mod:`.data_movement`, :mod:`.losses`, :mod:`.pooling`, :mod:`.optim`,
  :mod:`.rnn`, :mod:`.selection`: formulas, each module with its table ``FORMULAS``;
- :data:`REGISTRY`: those tables combined, the default of every analysis.

Which ops of a trace are counted, and which are unsupported, is a stage of the analysis:
:mod:`traceprof.analysis.op_costs`.
"""

from traceprof.flops import (
    attention,
    conv,
    data_movement,
    losses,
    matmul,
    norm,
    optim,
    pointwise,
    pooling,
    reduction,
    rnn,
    selection,
)
from traceprof.flops.registry import FAMILIES, MATRIX_FAMILIES, Entry, Family, Registry
from traceprof.flops.shapes import ArgumentError, OpArgs, OpCost

#: every formula: the modules' tables, combined in this order (an op in two is an error)
REGISTRY = Registry.combined(
    attention.FORMULAS,
    conv.FORMULAS,
    data_movement.FORMULAS,
    losses.FORMULAS,
    matmul.FORMULAS,
    norm.FORMULAS,
    optim.FORMULAS,
    pointwise.FORMULAS,
    pooling.FORMULAS,
    reduction.FORMULAS,
    rnn.FORMULAS,
    selection.FORMULAS,
)

__all__ = [
    "FAMILIES",
    "MATRIX_FAMILIES",
    "REGISTRY",
    "ArgumentError",
    "Entry",
    "Family",
    "OpArgs",
    "OpCost",
    "Registry",
]

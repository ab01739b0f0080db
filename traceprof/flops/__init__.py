"""FLOPs, MACs and bytes of every op of a trace, computed from its recorded shapes.

Traces carry no FLOPs (``with_flops=True`` writes none into the JSON): traceprof computes them
from each op's ``Input Dims``, ``Input type`` and ``Concrete Inputs`` with a registry of formulas,
one per op or op family (docs/flops.md).

- :mod:`.registry`: the registry (:data:`REGISTRY`) and op families;
- :mod:`.shapes`: decoded op arguments and the cost record;
- :mod:`.matmul`, :mod:`.conv`, :mod:`.attention`, :mod:`.norm`, :mod:`.pointwise`,
  :mod:`.reduction`, :mod:`.data_movement`, :mod:`.losses`, :mod:`.pooling`, :mod:`.optim`,
  :mod:`.rnn`: formulas;
- :mod:`.count`: which ops of a trace are counted, and which are unsupported.
"""

from traceprof.flops import (  # noqa: F401  (importing them fills REGISTRY)
    attention, conv, data_movement, losses, matmul, norm, optim, pointwise, pooling, reduction,
    rnn,
)
from traceprof.analysis.op_costs import OpCosts, count_ops
from traceprof.flops.registry import FAMILIES, MATRIX_FAMILIES, REGISTRY, Entry, Family, Registry
from traceprof.flops.shapes import ArgumentError, OpArgs, OpCost

__all__ = [
    "FAMILIES",
    "MATRIX_FAMILIES",
    "REGISTRY",
    "ArgumentError",
    "Entry",
    "Family",
    "OpArgs",
    "OpCost",
    "OpCosts",
    "Registry",
    "count_ops",
]

"""Optimizer ops: the multi-tensor ``_foreach_*`` ops and the fused optimizers.

Traces record the shapes of tensor lists but not their element type: list elements are taken as
fp32 (the usual dtype of parameters and optimizer states). A ``_foreach_`` op costs what its
elementwise op costs on every element of its first list. Fused optimizers, per parameter
element: Adam/AdamW 13 FLOPs (+2 with weight decay, +1 with amsgrad); SGD 2 (+2 with weight
decay, +3 with momentum, +2 with Nesterov); Adagrad 6 (+2 with weight decay).
"""

from __future__ import annotations

from math import prod

from traceprof.flops.registry import Family, Registry
from traceprof.flops.shapes import LIST_DTYPE, OpArgs, OpCost, nbytes

#: this module's formulas: one of the tables traceprof.flops.REGISTRY is made of
FORMULAS = Registry()
_R = FORMULAS

_FOREACH_PER_ELEMENT: dict[str, int] = {
    **dict.fromkeys(
        (
            "add",
            "sub",
            "mul",
            "div",
            "neg",
            "sqrt",
            "rsqrt",
            "exp",
            "log",
            "abs",
            "reciprocal",
            "sign",
            "maximum",
            "minimum",
            "clamp_max",
            "clamp_min",
            "pow",
            "sigmoid",
            "tanh",
            "expm1",
            "log1p",
            "floor",
            "ceil",
            "round",
            "trunc",
            "frac",
            "sin",
            "cos",
            "erf",
        ),
        1,
    ),
    **dict.fromkeys(("addcmul", "addcdiv", "lerp"), 3),
    **dict.fromkeys(("copy", "zero"), 0),
}


def _list_elements(shapes) -> int:
    return sum(prod(s) for s in shapes)


def _list_bytes(shapes) -> float:
    return sum(nbytes(s, LIST_DTYPE) for s in shapes)


def foreach(a: OpArgs) -> OpCost:
    base = a.name.removeprefix("aten::_foreach_").rstrip("_")
    first = a.tensor_list(0)
    per_element = _FOREACH_PER_ELEMENT[base]
    reads = 0.0 if base == "zero" else a.input_bytes()
    if base == "copy":  # copy_(self, src): reads src only
        reads = _list_bytes(a.tensor_list(1))
    writes = [(s, LIST_DTYPE) for s in first]  # in place or not: one list like the first
    return a.cost(flops=per_element * _list_elements(first), reads=reads, writes=writes, dtype=LIST_DTYPE)


_FOREACH_NAMES = tuple(
    n
    for base in _FOREACH_PER_ELEMENT
    for n in (f"aten::_foreach_{base}", f"aten::_foreach_{base}_")
    if n != "aten::_foreach_zero" and n != "aten::_foreach_copy"
)
_R.formula(*_FOREACH_NAMES, family=Family.OPTIMIZER)(foreach)


@_R.formula("aten::_foreach_norm", family=Family.OPTIMIZER)
def foreach_norm(a: OpArgs) -> OpCost:
    first = a.tensor_list(0)
    return a.cost(flops=2 * _list_elements(first), writes=[((len(first),), LIST_DTYPE)], dtype=LIST_DTYPE)


def _fused(a: OpArgs, per_element: int, read_lists: tuple[int, ...], write_lists: tuple[int, ...]) -> OpCost:
    params = a.tensor_list(0)
    reads = sum(_list_bytes(a.tensor_list(i)) for i in read_lists)
    writes = [(s, LIST_DTYPE) for i in write_lists for s in a.tensor_list(i)]
    return a.cost(flops=per_element * _list_elements(params), reads=reads, writes=writes, dtype=LIST_DTYPE)


@_R.formula(
    "aten::_fused_adam_",
    "aten::_fused_adamw_",
    "aten::_fused_adam",
    "aten::_fused_adamw",
    family=Family.OPTIMIZER,
)
def fused_adam(a: OpArgs) -> OpCost:
    """(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2,
    weight_decay, eps, amsgrad, maximize, ...)"""
    weight_decay = a.number(9, 0.0) != 0.0
    amsgrad = a.flag(11, False)
    lists = (0, 1, 2, 3, 4) if amsgrad else (0, 1, 2, 3)
    written = (0, 2, 3, 4) if amsgrad else (0, 2, 3)
    return _fused(a, 13 + 2 * weight_decay + amsgrad, lists, written)


@_R.formula("aten::_fused_sgd_", "aten::_fused_sgd", family=Family.OPTIMIZER)
def fused_sgd(a: OpArgs) -> OpCost:
    """(self, grads, momentum_buffer_list, weight_decay, momentum, lr, dampening, nesterov, ...)"""
    weight_decay = a.number(3, 0.0) != 0.0
    momentum = a.number(4, 0.0) != 0.0
    nesterov = momentum and a.flag(7, False)
    per_element = 2 + 2 * weight_decay + 3 * momentum + 2 * nesterov
    return _fused(a, per_element, (0, 1, 2) if momentum else (0, 1), (0, 2) if momentum else (0,))


@_R.formula("aten::_fused_adagrad_", "aten::_fused_adagrad", family=Family.OPTIMIZER)
def fused_adagrad(a: OpArgs) -> OpCost:
    """(self, grads, state_sums, state_steps, lr, lr_decay, weight_decay, eps, maximize, ...)"""
    weight_decay = a.number(6, 0.0) != 0.0
    return _fused(a, 6 + 2 * weight_decay, (0, 1, 2), (0, 2))

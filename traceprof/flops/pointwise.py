"""Elementwise ops, activations and dropout, forward, backward and in-place.

The output of an elementwise op has the broadcast shape of its tensor arguments (the shape of
``self`` for the in-place form ``op_``). FLOPs per output element: 1 for arithmetic, comparisons
and activations (DeepSpeed's convention for activations, kept for their backward ops); 3 for
``addcmul``, ``addcdiv`` and ``lerp`` (two multiplies and an add). Selection (``where``,
``masked_fill``) and random fills move bytes and count no FLOPs.
"""

from __future__ import annotations

from math import prod

from traceprof.flops.registry import Family, Registry
from traceprof.flops.shapes import ArgumentError, OpArgs, OpCost, broadcast

#: this module's formulas: one of the tables traceprof.flops.REGISTRY is made of
FORMULAS = Registry()
_R = FORMULAS


def _with_inplace(*names: str) -> tuple[str, ...]:
    return tuple(n for name in names for n in (f"aten::{name}", f"aten::{name}_"))


def elementwise(per_element: int, first_operand: int = 0):
    """Arguments from ``first_operand`` on are the operands (``where`` has its condition
    before them); the output takes the dtype of the largest operand (a Python number arrives
    as a 0-d double tensor and does not change it)."""

    def formula(a: OpArgs) -> OpCost:
        tensors = [i for i in range(len(a)) if a.is_tensor(i)]
        if not tensors:
            raise ArgumentError(f"{a.name}: no tensor argument")
        shapes = [a.shape(i) for i in tensors]
        out = shapes[0] if a.name.endswith("_") else broadcast(*shapes)
        operands = [i for i in tensors if i >= first_operand] or tensors
        largest = max(operands, key=lambda i: (prod(a.shape(i)), -i))
        dtype = a.dtype(largest)
        return a.cost(flops=per_element * prod(out), writes=[(out, dtype)], dtype=dtype)

    return formula


ARITHMETIC = _with_inplace(
    "add",
    "sub",
    "subtract",
    "mul",
    "multiply",
    "div",
    "divide",
    "true_divide",
    "floor_divide",
    "rsub",
    "neg",
    "negative",
    "abs",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "pow",
    "float_power",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "square",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "atan2",
    "sinh",
    "cosh",
    "asinh",
    "acosh",
    "atanh",
    "erf",
    "erfc",
    "erfinv",
    "sign",
    "sgn",
    "floor",
    "ceil",
    "round",
    "trunc",
    "frac",
    "fmod",
    "remainder",
    "maximum",
    "minimum",
    "fmax",
    "fmin",
    "hypot",
    "xlogy",
    "lgamma",
    "digamma",
    "nan_to_num",
    "copysign",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logical_not",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_not",
    "isnan",
    "isinf",
    "isneginf",
    "isposinf",
    "isfinite",
)
FUSED_MULTIPLY_ADD = _with_inplace("addcmul", "addcdiv", "lerp")
ACTIVATIONS = _with_inplace(
    "relu",
    "relu6",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "elu",
    "selu",
    "celu",
    "leaky_relu",
    "hardtanh",
    "hardswish",
    "hardsigmoid",
    "mish",
    "softplus",
    "threshold",
    "rrelu_with_noise",
    "clamp",
    "clamp_min",
    "clamp_max",
    "clip",
) + (
    "aten::prelu",
    "aten::_prelu_kernel",
    "aten::log_sigmoid_forward",
    "aten::log_sigmoid",
    "aten::_conj_physical",
    "aten::conj_physical",
)
ACTIVATION_BACKWARDS = tuple(
    f"aten::{n}"
    for n in (
        "threshold_backward",
        "gelu_backward",
        "silu_backward",
        "sigmoid_backward",
        "tanh_backward",
        "elu_backward",
        "leaky_relu_backward",
        "hardtanh_backward",
        "hardswish_backward",
        "hardsigmoid_backward",
        "softplus_backward",
        "mish_backward",
        "log_sigmoid_backward",
        "_prelu_kernel_backward",
        "rrelu_with_noise_backward",
    )
)

_R.formula(*ARITHMETIC, family=Family.POINTWISE)(elementwise(1))
_R.formula(*FUSED_MULTIPLY_ADD, family=Family.POINTWISE)(elementwise(3))
_R.formula(*ACTIVATIONS, *ACTIVATION_BACKWARDS, family=Family.ACTIVATION)(elementwise(1))
_R.formula("aten::where", family=Family.MEMORY)(elementwise(0, first_operand=1))
_R.formula(*_with_inplace("masked_fill"), "aten::masked_scatter", family=Family.MEMORY)(elementwise(0))


@_R.formula("aten::glu", family=Family.ACTIVATION)
def glu(a: OpArgs) -> OpCost:
    """glu(self, dim): the output has half of ``self`` along ``dim``."""
    x = a.shape(0)
    dim = a.integer(1, -1) % len(x)
    out = x[:dim] + (x[dim] // 2,) + x[dim + 1 :]
    return a.cost(flops=2 * prod(out), writes=[(out, a.dtype(0))])


@_R.formula("aten::glu_backward", family=Family.ACTIVATION)
def glu_backward(a: OpArgs) -> OpCost:
    """glu_backward(grad_output, self, dim)"""
    x = a.shape(1)
    return a.cost(flops=2 * prod(x), writes=[(x, a.dtype(1))], dtype=a.dtype(1))


@_R.formula("aten::native_dropout", family=Family.POINTWISE)
def native_dropout(a: OpArgs) -> OpCost:
    """native_dropout(input, p, train): a mask and one multiply per element."""
    x = a.shape(0)
    return a.cost(flops=prod(x), writes=[(x, a.dtype(0)), (x, "bool")])


@_R.formula("aten::native_dropout_backward", family=Family.POINTWISE)
def native_dropout_backward(a: OpArgs) -> OpCost:
    """native_dropout_backward(grad_output, mask, scale)"""
    g = a.shape(0)
    return a.cost(flops=prod(g), writes=[(g, a.dtype(0))])


@_R.formula(
    "aten::bernoulli_",
    "aten::uniform_",
    "aten::normal_",
    "aten::random_",
    "aten::exponential_",
    "aten::geometric_",
    "aten::log_normal_",
    "aten::cauchy_",
    "aten::bernoulli",
    family=Family.MEMORY,
)
def random_fill(a: OpArgs) -> OpCost:
    """Random numbers written over ``self``: bytes written, no FLOPs."""
    x = a.shape(0)
    return a.cost(flops=0, writes=[(x, a.dtype(0))], reads=0.0)


_R.no_cost(
    "aten::dropout",
    "aten::dropout_",
    "aten::feature_dropout",
    "aten::feature_dropout_",
    "aten::alpha_dropout",
    "aten::alpha_dropout_",
    "aten::feature_alpha_dropout",
)

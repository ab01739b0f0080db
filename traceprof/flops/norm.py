"""Normalizations (layer, RMS, group, batch) and softmax, forward and backward.

FLOPs per element follow the DeepSpeed flops profiler for the forward: layer/group norm and
batch norm in training 5 with an affine weight, 4 without; batch norm in eval 2 (1 without
weight); softmax and log-softmax 1. RMS norm: 4 with a weight, 3 without. A backward costs
twice its forward. Bytes: inputs read once, the main output written once (the small saved
statistics are left out).
"""

from __future__ import annotations

from math import prod
from typing import NamedTuple

from traceprof.flops.registry import Family, Registry
from traceprof.flops.shapes import OpArgs, OpCost

#: this module's formulas: one of the tables traceprof.flops.REGISTRY is made of
FORMULAS = Registry()
_R = FORMULAS


def _norm_cost(a: OpArgs, x_pos: int, per_element: int, writes_pos: tuple[int, ...] = ()) -> OpCost:
    x = a.shape(x_pos)
    dtype = a.dtype(x_pos)
    writes = [(x, dtype)] + [(a.shape(i), a.dtype(i)) for i in writes_pos if a.is_tensor(i)]
    return a.cost(flops=prod(x) * per_element, writes=writes, dtype=dtype)


class _PerElement(NamedTuple):
    """A normalization's forward FLOPs per element of its input (argument 0): ``affine`` with
    a weight (the argument at ``weight_pos`` is a tensor), ``plain`` without."""

    affine: int
    plain: int

    def forward(self, a: OpArgs, weight_pos: int) -> OpCost:
        return _norm_cost(a, 0, self.affine if a.is_tensor(weight_pos) else self.plain)

    def backward(self, a: OpArgs, weight_pos: int, grads: tuple[int, ...]) -> OpCost:
        """Twice the forward; with a weight, also the weight's and bias's gradients written
        (``grads``: the positions of the arguments of their shapes)."""
        if a.is_tensor(weight_pos):
            return _norm_cost(a, 0, 2 * self.affine, grads)
        return _norm_cost(a, 0, 2 * self.plain)


#: layer norm, group norm and batch norm in training
_NORM = _PerElement(affine=5, plain=4)
_RMS_NORM = _PerElement(affine=4, plain=3)
_EVAL_BATCH_NORM = _PerElement(affine=2, plain=1)


# --- layer norm: layer_norm(input, normalized_shape, weight, bias, eps, ...), native_layer_norm


@_R.formula("aten::layer_norm", "aten::native_layer_norm", family=Family.NORM)
def layer_norm(a: OpArgs) -> OpCost:
    return _NORM.forward(a, weight_pos=2)


@_R.formula("aten::native_layer_norm_backward", family=Family.NORM)
def layer_norm_backward(a: OpArgs) -> OpCost:
    """(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)"""
    return _NORM.backward(a, weight_pos=5, grads=(5, 6))


# --- RMS norm: rms_norm(input, normalized_shape, weight, eps), _fused_rms_norm


@_R.formula("aten::rms_norm", "aten::_fused_rms_norm", family=Family.NORM)
def rms_norm(a: OpArgs) -> OpCost:
    return _RMS_NORM.forward(a, weight_pos=2)


@_R.formula("aten::_fused_rms_norm_backward", family=Family.NORM)
def rms_norm_backward(a: OpArgs) -> OpCost:
    """(grad_out, input, normalized_shape, rstd, weight, output_mask)"""
    return _RMS_NORM.backward(a, weight_pos=4, grads=(4,))


# --- group norm: group_norm(input, num_groups, weight, bias, ...),
# native_group_norm(input, weight, bias, N, C, HxW, group, eps)


@_R.formula("aten::group_norm", family=Family.NORM)
def group_norm(a: OpArgs) -> OpCost:
    return _NORM.forward(a, weight_pos=2)


@_R.formula("aten::native_group_norm", family=Family.NORM)
def native_group_norm(a: OpArgs) -> OpCost:
    return _NORM.forward(a, weight_pos=1)


@_R.formula("aten::native_group_norm_backward", family=Family.NORM)
def group_norm_backward(a: OpArgs) -> OpCost:
    """(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask)"""
    return _NORM.backward(a, weight_pos=4, grads=(4, 4))


# --- batch norm: (input, weight, bias, running_mean, running_var, training, momentum, eps, ...)


def _batch_norm(training: bool) -> _PerElement:
    return _NORM if training else _EVAL_BATCH_NORM


@_R.formula(
    "aten::batch_norm",
    "aten::native_batch_norm",
    "aten::cudnn_batch_norm",
    "aten::miopen_batch_norm",
    family=Family.NORM,
)
def batch_norm(a: OpArgs) -> OpCost:
    return _batch_norm(a.flag(5)).forward(a, weight_pos=1)


@_R.formula("aten::_native_batch_norm_legit", family=Family.NORM)
def batch_norm_legit(a: OpArgs) -> OpCost:
    # two overloads under one name: with running stats (training at 5) or without (at 3)
    training = a.flag(5) if a.is_tensor(3) else a.flag(3)
    return _batch_norm(training).forward(a, weight_pos=1)


@_R.formula("aten::_native_batch_norm_legit_no_training", family=Family.NORM)
def batch_norm_eval(a: OpArgs) -> OpCost:
    return _EVAL_BATCH_NORM.forward(a, weight_pos=1)


@_R.formula("aten::native_batch_norm_backward", family=Family.NORM)
def batch_norm_backward(a: OpArgs) -> OpCost:
    """(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, ...)"""
    return _NORM.backward(a, weight_pos=2, grads=(2, 2))


@_R.formula("aten::cudnn_batch_norm_backward", "aten::miopen_batch_norm_backward", family=Family.NORM)
def backend_batch_norm_backward(a: OpArgs) -> OpCost:
    """(input, grad_output, weight, ...): the weight is always given"""
    return _norm_cost(a, 1, 2 * _NORM.affine, (2, 2))


_R.no_cost("aten::_batch_norm_impl_index", "aten::instance_norm")


# --- softmax: softmax(self, dim, dtype), _softmax(self, dim, half_to_float), log_softmax ...


@_R.formula(
    "aten::softmax",
    "aten::_softmax",
    "aten::_safe_softmax",
    "aten::log_softmax",
    "aten::_log_softmax",
    "aten::special_softmax",
    family=Family.SOFTMAX,
)
def softmax(a: OpArgs) -> OpCost:
    return _norm_cost(a, 0, 1)


@_R.formula("aten::_softmax_backward_data", "aten::_log_softmax_backward_data", family=Family.SOFTMAX)
def softmax_backward(a: OpArgs) -> OpCost:
    """(grad_output, output, dim, input_dtype)"""
    g = a.shape(0)
    dtype = a.dtype(0)
    return a.cost(flops=2 * prod(g), writes=[(g, a.scalar_type(3) or dtype)], dtype=dtype)

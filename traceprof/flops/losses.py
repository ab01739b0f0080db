"""Loss functions, forward and backward.

FLOPs per input element: MSE 3 (subtract, square, accumulate), L1 3, smooth L1 / Huber 4,
KL divergence 4, soft margin 4, binary cross-entropy 7 (two logs, two products, sums), with
logits 8. Negative log-likelihood picks one value per target: 1 FLOP per target element (2 with
class weights). ``cross_entropy`` is counted through the ``log_softmax`` and ``nll_loss`` it
runs. The output is a scalar unless ``reduction`` is 0 (none).
"""

from __future__ import annotations

from math import prod

from traceprof.flops.registry import Family, Registry
from traceprof.flops.shapes import OpArgs, OpCost, nbytes

#: this module's formulas: one of the tables traceprof.flops.REGISTRY is made of
FORMULAS = Registry()
_R = FORMULAS

#: op -> (FLOPs per element, position of the reduction argument)
_ELEMENTWISE_LOSSES: dict[str, tuple[int, int]] = {
    "aten::mse_loss": (3, 2),
    "aten::l1_loss": (3, 2),
    "aten::smooth_l1_loss": (4, 2),
    "aten::huber_loss": (4, 2),
    "aten::kl_div": (4, 2),
    "aten::soft_margin_loss": (4, 2),
    "aten::binary_cross_entropy": (7, 3),
    "aten::binary_cross_entropy_with_logits": (8, 4),
}
#: backward ops (grad_output, self, target, ...): FLOPs per element
_ELEMENTWISE_LOSS_BACKWARDS: dict[str, int] = {
    "aten::mse_loss_backward": 3,
    "aten::l1_loss_backward": 3,
    "aten::smooth_l1_loss_backward": 4,
    "aten::huber_loss_backward": 4,
    "aten::soft_margin_loss_backward": 4,
    "aten::binary_cross_entropy_backward": 5,
}


def elementwise_loss(a: OpArgs) -> OpCost:
    per_element, reduction_pos = _ELEMENTWISE_LOSSES[a.name]
    x = a.shape(0)
    out = x if a.integer(reduction_pos, 1) == 0 else ()
    return a.cost(flops=per_element * prod(x), writes=[(out, a.dtype(0))])


def elementwise_loss_backward(a: OpArgs) -> OpCost:
    x = a.shape(1)
    return a.cost(
        flops=_ELEMENTWISE_LOSS_BACKWARDS[a.name] * prod(x), writes=[(x, a.dtype(1))], dtype=a.dtype(1)
    )


_R.formula(*_ELEMENTWISE_LOSSES, family=Family.LOSS)(elementwise_loss)
_R.formula(*_ELEMENTWISE_LOSS_BACKWARDS, family=Family.LOSS)(elementwise_loss_backward)


@_R.formula("aten::nll_loss_forward", "aten::nll_loss2d_forward", family=Family.LOSS)
def nll_loss(a: OpArgs) -> OpCost:
    """nll_loss_forward(self, target, weight, reduction, ignore_index)"""
    target = a.shape(1)
    per_target = 2 if a.is_tensor(2) else 1
    out = target if a.integer(3, 1) == 0 else ()
    dtype = a.dtype(0)
    # the targets, and one input value per target (not the whole input)
    reads = nbytes(target, a.dtype(1)) + nbytes(target, dtype)
    return a.cost(
        flops=per_target * prod(target), writes=[(out, dtype), ((), dtype)], dtype=dtype, reads=reads
    )


@_R.formula("aten::nll_loss_backward", "aten::nll_loss2d_backward", family=Family.LOSS)
def nll_loss_backward(a: OpArgs) -> OpCost:
    """nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    writes a dense gradient shaped like ``self``."""
    x, target = a.shape(1), a.shape(2)
    return a.cost(flops=prod(target), writes=[(x, a.dtype(1))], dtype=a.dtype(1))


_R.no_cost("aten::cross_entropy_loss", "aten::nll_loss", "aten::nll_loss_nd", "aten::nll_loss2d")

"""Convolutions 1d/2d/3d, transposed and grouped, and ``convolution_backward``.

A convolution is ``N * prod(spatial) * w[0] * w[1] * prod(kernel)`` MACs, where ``spatial`` is
the output's spatial size (the *input's* for a transposed convolution) and ``w`` the weight's
shape (``[C_out, C_in / groups, *kernel]``; ``[C_in, C_out / groups, *kernel]`` when transposed),
so groups and depthwise convolutions come out right. The output size follows from stride,
padding and dilation in ``Concrete Inputs``. As in ``torch.utils.flop_counter``, the bias is not
counted.

``convolution_backward`` computes, per its ``output_mask``: the input gradient (as many MACs as
the forward), the weight gradient (as many again) and the bias gradient (not counted).
"""

from __future__ import annotations

from math import prod
from typing import NamedTuple

from traceprof.flops.registry import Family, Registry
from traceprof.flops.shapes import ArgumentError, OpArgs, OpCost, Shape

#: this module's formulas: one of the tables traceprof.flops.REGISTRY is made of
FORMULAS = Registry()
_R = FORMULAS


class ConvArgs(NamedTuple):
    """Where each argument sits in one convolution op's schema (-1: absent)."""

    stride: int
    padding: int
    dilation: int
    transposed: int  # index of the ``transposed`` flag, or -1
    output_padding: int
    groups: int
    always_transposed: bool = False


# positions after (input, weight[, bias]) in each op's schema
_LAYOUTS: dict[str, ConvArgs] = {
    # conv{1,2,3}d(input, weight, bias, stride, padding, dilation, groups)
    **{f"aten::conv{d}d": ConvArgs(3, 4, 5, -1, -1, 6) for d in (1, 2, 3)},
    # conv_transpose{1,2,3}d(input, weight, bias, stride, padding, output_padding, groups, dilation)
    **{f"aten::conv_transpose{d}d": ConvArgs(3, 4, 7, -1, 5, 6, True) for d in (1, 2, 3)},
    # convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    "aten::convolution": ConvArgs(3, 4, 5, 6, 7, 8),
    "aten::_convolution": ConvArgs(3, 4, 5, 6, 7, 8),
    "aten::convolution_overrideable": ConvArgs(3, 4, 5, 6, 7, 8),
    # backend ops: padding before stride, and no bias argument for cuDNN
    "aten::cudnn_convolution": ConvArgs(
        3, 2, 4, -1, -1, 5
    ),  # (self, weight, padding, stride, dilation, groups)
    "aten::cudnn_convolution_transpose": ConvArgs(4, 2, 5, -1, 3, 6, True),
    "aten::miopen_convolution": ConvArgs(
        4, 3, 5, -1, -1, 6
    ),  # (self, weight, bias, padding, stride, dilation, groups)
    "aten::miopen_depthwise_convolution": ConvArgs(4, 3, 5, -1, -1, 6),
    "aten::miopen_convolution_transpose": ConvArgs(5, 3, 6, -1, 4, 7, True),
    "aten::mkldnn_convolution": ConvArgs(
        4, 3, 5, -1, -1, 6
    ),  # (self, weight, bias, padding, stride, dilation, groups)
    # CPU (and old CUDA) fallbacks: (self, weight, kernel_size, bias, stride, padding[, dilation]);
    # groups only through a depthwise weight [C, 1, *kernel], which the MACs come out of
    **{
        name: ConvArgs(4, 5, -1, -1, -1, -1)
        for name in (
            "aten::thnn_conv2d",
            "aten::thnn_conv2d_forward",
            "aten::_slow_conv2d_forward",
            "aten::slow_conv3d",
            "aten::slow_conv3d_forward",
        )
    },
    **{
        name: ConvArgs(4, 5, 6, -1, -1, -1)
        for name in (
            "aten::slow_conv_dilated2d",
            "aten::slow_conv_dilated3d",
            "aten::thnn_conv_depthwise2d",
            "aten::thnn_conv_depthwise2d_forward",
            "aten::_conv_depthwise2d",
            "aten::conv_depthwise3d",
        )
    },
}


def out_spatial(
    x_sp: Shape, kernel: Shape, stride, padding, dilation, transposed: bool, output_padding
) -> Shape:
    """Spatial output size of a convolution (or of a transposed one)."""
    out = []
    for i, k in enumerate(kernel):
        if transposed:
            o = (x_sp[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k - 1) + output_padding[i] + 1
        else:
            o = (x_sp[i] + 2 * padding[i] - dilation[i] * (k - 1) - 1) // stride[i] + 1
        if o <= 0:
            raise ArgumentError(f"convolution output size {o} from input {x_sp}")
        out.append(o)
    return tuple(out)


def conv_macs(x: Shape, w: Shape, out_sp: Shape, transposed: bool) -> int:
    spatial = x[2:] if transposed else out_sp
    return x[0] * prod(spatial) * w[0] * w[1] * prod(w[2:])


def _padding(a: OpArgs, i: int, n: int, kernel: Shape, dilation) -> tuple[int, ...]:
    v = a.value(i)
    if v == "valid":
        return (0,) * n
    if v == "same":  # only with stride 1; the output keeps the input's size
        return tuple(dilation[j] * (kernel[j] - 1) // 2 for j in range(n))
    return a.ints(i, n, default=(0,) * n)


def conv(a: OpArgs) -> OpCost:
    lay = _LAYOUTS[a.name]
    x, w = a.shape(0), a.shape(1)
    n = len(w) - 2
    if len(x) == n + 1:  # unbatched input [C, *spatial]
        x = (1,) + x
    if n < 1 or len(x) != n + 2:
        raise ArgumentError(f"{a.name}: input {x} and weight {w} do not fit")
    kernel = w[2:]
    transposed = lay.always_transposed or (lay.transposed >= 0 and a.flag(lay.transposed))
    stride = a.ints(lay.stride, n, default=(1,) * n)
    dilation = a.ints(lay.dilation, n, default=(1,) * n) if lay.dilation >= 0 else (1,) * n
    padding = _padding(a, lay.padding, n, kernel, dilation)
    out_pad = a.ints(lay.output_padding, n, default=(0,) * n) if lay.output_padding >= 0 else (0,) * n
    groups = a.integer(lay.groups, 1) if lay.groups >= 0 else x[1] // max(w[1], 1)
    out_sp = out_spatial(x[2:], kernel, stride, padding, dilation, transposed, out_pad)
    if a.value(lay.padding) == "same":
        out_sp = x[2:]
    macs = conv_macs(x, w, out_sp, transposed)
    c_out = w[1] * groups if transposed else w[0]
    dtype = a.dtype(0)
    return a.cost(flops=2 * macs, macs=macs, writes=[((x[0], c_out) + out_sp, dtype)], dtype=dtype)


_R.formula(*_LAYOUTS, family=Family.CONV)(conv)


@_R.formula("aten::convolution_backward", family=Family.CONV)
def convolution_backward(a: OpArgs) -> OpCost:
    """``convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
    dilation, transposed, output_padding, groups, output_mask)``."""
    g, x, w = a.shape(0), a.shape(1), a.shape(2)
    transposed = a.flag(7)
    mask = a.flags(10)
    if len(mask) != 3:
        raise ArgumentError(f"{a.name}: output_mask {mask}")
    if len(x) != len(w) or len(g) != len(w):
        raise ArgumentError(f"{a.name}: shapes {g}, {x}, {w} do not fit")
    macs_one = conv_macs(x, w, g[2:], transposed)
    macs = macs_one * (int(mask[0]) + int(mask[1]))
    dtype = a.dtype(0)
    writes = []
    if mask[0]:
        writes.append((x, a.dtype(1)))
    if mask[1]:
        writes.append((w, a.dtype(2)))
    if mask[2]:
        writes.append(((g[1],), dtype))
    return a.cost(flops=2 * macs, macs=macs, writes=writes, dtype=dtype)


@_R.formula(
    "aten::cudnn_convolution_backward_input", "aten::miopen_convolution_backward_input", family=Family.CONV
)
def convolution_backward_input(a: OpArgs) -> OpCost:
    """``cudnn_convolution_backward_input(self_size, grad_output, weight, padding, stride,
    dilation, groups, ...)`` (PyTorch < 1.11, 2021 traces): the input gradient, as many MACs as
    the forward, from the gradient's spatial size (the forward's output) and the weight: no
    stride or padding needed, which 2021 traces do not record."""
    g, w = a.shape(1), a.shape(2)
    if len(g) != len(w) or len(w) < 3 or g[1] != w[0]:
        raise ArgumentError(f"{a.name}: gradient {g} and weight {w} do not fit")
    macs = g[0] * prod(g[2:]) * w[0] * w[1] * prod(w[2:])
    return a.cost(flops=2 * macs, macs=macs, dtype=a.dtype(1))


#: backward ops of the CPU fallbacks: (grad_output, self, weight, kernel_size, stride, padding,
#: ..., output_mask), the mask last
_SLOW_BACKWARD = (
    "aten::thnn_conv2d_backward",
    "aten::_slow_conv2d_backward",
    "aten::slow_conv2d_backward",
    "aten::slow_conv3d_backward",
    "aten::slow_conv_dilated2d_backward",
    "aten::slow_conv_dilated3d_backward",
    "aten::thnn_conv_depthwise2d_backward",
    "aten::conv_depthwise3d_backward",
)


@_R.formula(*_SLOW_BACKWARD, family=Family.CONV)
def slow_convolution_backward(a: OpArgs) -> OpCost:
    """The backward of the CPU fallbacks: per ``output_mask`` (its last argument; the depthwise
    ones have no bias gradient), the input and the weight gradient, each as many MACs as the
    forward."""
    g, x, w = a.shape(0), a.shape(1), a.shape(2)
    mask = a.flags(len(a) - 1)
    if len(mask) not in (2, 3) or len(x) != len(w) or len(g) != len(w):
        raise ArgumentError(f"{a.name}: shapes {g}, {x}, {w}, output_mask {mask}")
    macs = conv_macs(x, w, g[2:], False) * (int(mask[0]) + int(mask[1]))
    writes = [(s, a.dtype(i)) for s, i, wanted in ((x, 1, mask[0]), (w, 2, mask[1])) if wanted]
    return a.cost(flops=2 * macs, macs=macs, writes=writes, dtype=a.dtype(0))


# --- traces without Concrete Inputs (PyTorch < 2.0, 2021 traces): stride, padding and dilation
# are not recorded, so a forward convolution's output size and a weight gradient's kernel are
# unknown from the op alone. Autograd joins the forward op to the backward ops it created
# (sequence numbers), and they hold the missing shapes: the gradient of the output has the
# output's shape, the forward op the weight's. traceprof.analysis.op_costs makes the pairs.

#: backward ops of convolutions: the position of the output's gradient in their arguments
GRADIENT_ARG: dict[str, int] = {
    "aten::convolution_backward": 0,
    "aten::cudnn_convolution_backward": 1,
    "aten::cudnn_convolution_backward_input": 1,
    "aten::cudnn_convolution_backward_weight": 1,
    "aten::miopen_convolution_backward": 1,
    "aten::miopen_convolution_backward_input": 1,
    "aten::miopen_convolution_backward_weight": 1,
    **dict.fromkeys(_SLOW_BACKWARD, 0),
}
#: forward convolutions that take their output size from the gradient when it is unknown
FORWARD_CONVOLUTIONS = frozenset(
    name for name, lay in _LAYOUTS.items() if lay.transposed < 0 and not lay.always_transposed
)
#: weight gradients that take their weight's shape from the forward op when it is unknown
WEIGHT_GRADIENTS = frozenset(
    {"aten::cudnn_convolution_backward_weight", "aten::miopen_convolution_backward_weight"}
)


def conv_given_gradient(forward: OpArgs, grad_output: Shape) -> OpCost:
    """A forward convolution (not transposed) whose output has ``grad_output``'s shape."""
    x, w = forward.shape(0), forward.shape(1)
    return _given_shapes(forward, x, w, grad_output, written=grad_output, dtype=forward.dtype(0))


def weight_gradient_given_weight(backward: OpArgs, weight: Shape) -> OpCost:
    """``*_convolution_backward_weight(weight_size, grad_output, self, ...)`` of a convolution
    whose weight has the shape ``weight``: as many MACs as the forward."""
    g, x = backward.shape(1), backward.shape(2)
    return _given_shapes(backward, x, weight, g, written=weight, dtype=backward.dtype(1))


def _given_shapes(a: OpArgs, x: Shape, w: Shape, g: Shape, *, written: Shape, dtype: str) -> OpCost:
    """An op as costly as the forward convolution of input ``x``, weight ``w`` and output
    gradient ``g`` (one of them from the op paired with ``a``), writing ``written``."""
    if len(x) != len(w) or len(g) != len(w) or g[1] != w[0] or g[0] != x[0]:
        raise ArgumentError(f"{a.name}: input {x}, weight {w} and gradient {g} do not fit")
    macs = conv_macs(x, w, g[2:], False)
    return a.cost(flops=2 * macs, macs=macs, writes=[(written, dtype)], dtype=dtype)


@_R.formula(*WEIGHT_GRADIENTS, family=Family.CONV)
def convolution_backward_weight(a: OpArgs) -> OpCost:
    """``*_convolution_backward_weight(weight_size, grad_output, self, padding, stride,
    dilation, groups, ...)`` (PyTorch < 1.11): the weight's shape from ``weight_size`` when it
    is recorded (else from the forward op: :func:`weight_gradient_given_weight`)."""
    return weight_gradient_given_weight(a, a.ints(0))

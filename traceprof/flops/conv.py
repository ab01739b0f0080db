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
    dilation = a.ints(lay.dilation, n, default=(1,) * n)
    padding = _padding(a, lay.padding, n, kernel, dilation)
    out_pad = a.ints(lay.output_padding, n, default=(0,) * n) if lay.output_padding >= 0 else (0,) * n
    groups = a.integer(lay.groups, 1)
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

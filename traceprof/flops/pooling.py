"""Pooling (max, average, adaptive; 1d/2d/3d), forward and backward.

FLOPs: one per input element, the DeepSpeed flops profiler's convention for pooling; the
backward ops likewise one per element of the input gradient. The output size follows from
kernel, stride, padding, dilation and ``ceil_mode`` (``Concrete Inputs``), or from
``output_size`` for adaptive pooling.
"""

from __future__ import annotations

from math import prod
from typing import NamedTuple

from traceprof.flops.registry import Family, Registry
from traceprof.flops.shapes import ArgumentError, OpArgs, OpCost, Shape

#: this module's formulas: one of the tables traceprof.flops.REGISTRY is made of
FORMULAS = Registry()
_R = FORMULAS


class Pool(NamedTuple):
    dims: int
    dilation: int  # position of dilation (-1: none); kernel, stride, padding are at 1, 2, 3
    ceil_mode: int
    indices: bool  # also writes int64 indices


_POOLS: dict[str, Pool] = {}
for _d in (1, 2, 3):
    _POOLS[f"aten::max_pool{_d}d"] = Pool(_d, 4, 5, False)
    _POOLS[f"aten::max_pool{_d}d_with_indices"] = Pool(_d, 4, 5, True)
    _POOLS[f"aten::avg_pool{_d}d"] = Pool(_d, -1, 4, False)
_POOLS["aten::mkldnn_max_pool2d"] = Pool(2, 4, 5, False)
#: Inductor's decomposition of max_pool2d_with_indices (compiled graphs' nodes, docs/attribution.md
#: "Compiled models"): the same arguments, int8 offsets instead of the indices
_POOLS["prims::_low_memory_max_pool_with_offsets"] = Pool(2, 4, 5, False)
_POOLS["aten::quantized_max_pool2d"] = Pool(2, 4, 5, False)

_ADAPTIVE: dict[str, tuple[int, bool]] = {}
for _d in (1, 2, 3):
    _ADAPTIVE[f"aten::adaptive_avg_pool{_d}d"] = (_d, False)
    _ADAPTIVE[f"aten::adaptive_max_pool{_d}d"] = (_d, True)
    if _d > 1:
        _ADAPTIVE[f"aten::_adaptive_avg_pool{_d}d"] = (_d, False)

_BACKWARDS = tuple(
    [f"aten::max_pool{d}d_with_indices_backward" for d in (2, 3)]
    + [f"aten::avg_pool{d}d_backward" for d in (2, 3)]
    + [f"aten::_adaptive_avg_pool{d}d_backward" for d in (2, 3)]
    + [f"aten::adaptive_max_pool{d}d_backward" for d in (2, 3)]
)


def pooled_size(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    span = n + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:  # the last window must start inside the input
        out -= 1
    if out <= 0:
        raise ArgumentError(f"pooling output size {out} from input size {n}")
    return out


def _out(x: Shape, spatial: Shape) -> Shape:
    return x[: len(x) - len(spatial)] + spatial


def pool(a: OpArgs) -> OpCost:
    p = _POOLS[a.name]
    x = a.shape(0)
    n = p.dims
    if len(x) < n + 1:
        raise ArgumentError(f"{a.name}: input {x}")
    kernel = a.ints(1, n)
    stride = a.ints(2, n, default=kernel)
    padding = a.ints(3, n, default=(0,) * n)
    dilation = a.ints(p.dilation, n, default=(1,) * n) if p.dilation >= 0 else (1,) * n
    ceil_mode = a.flag(p.ceil_mode, False)
    spatial = tuple(
        pooled_size(x[-n + i], kernel[i], stride[i], padding[i], dilation[i], ceil_mode) for i in range(n)
    )
    out = _out(x, spatial)
    dtype = a.dtype(0)
    writes = [(out, dtype)] + ([(out, "int64")] if p.indices else [])
    return a.cost(flops=prod(x), writes=writes, dtype=dtype)


def adaptive_pool(a: OpArgs) -> OpCost:
    n, indices = _ADAPTIVE[a.name]
    x = a.shape(0)
    out = _out(x, a.ints(1, n))
    dtype = a.dtype(0)
    writes = [(out, dtype)] + ([(out, "int64")] if indices else [])
    return a.cost(flops=prod(x), writes=writes, dtype=dtype)


def pool_backward(a: OpArgs) -> OpCost:
    """(grad_output, self, ...): writes a gradient shaped like ``self``."""
    x = a.shape(1)
    return a.cost(flops=prod(x), writes=[(x, a.dtype(1))], dtype=a.dtype(1))


_R.formula(*_POOLS, family=Family.POOLING)(pool)
_R.formula(*_ADAPTIVE, family=Family.POOLING)(adaptive_pool)
_R.formula(*_BACKWARDS, family=Family.POOLING)(pool_backward)

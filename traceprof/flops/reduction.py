"""Reductions: sum, mean, max/min, var/std, norms, logsumexp, cumulative sums.

FLOPs per *input* element: 1 (sum, mean, prod, max, min, any, all, cumulative ops), 2 (norms),
3 (var, std and their ``_mean`` forms, logsumexp). The output shape follows from the reduced
dimensions and ``keepdim`` (a full reduction when no dimension is given).
"""

from __future__ import annotations

from math import prod
from typing import NamedTuple

from traceprof.flops.registry import Family, Registry
from traceprof.flops.shapes import ArgumentError, OpArgs, OpCost, Shape, broadcast

#: this module's formulas: one of the tables traceprof.flops.REGISTRY is made of
FORMULAS = Registry()
_R = FORMULAS


class Reduce(NamedTuple):
    per_element: int
    dim: int  # position of the dim argument (-1: none, a full reduction)
    keepdim: int  # position of keepdim (-1: none)


_REDUCTIONS: dict[str, Reduce] = {
    **{
        f"aten::{n}": Reduce(1, 1, 2)
        for n in (
            "sum",
            "nansum",
            "mean",
            "nanmean",
            "amax",
            "amin",
            "all",
            "any",
            "argmax",
            "argmin",
            "count_nonzero",
            "prod",
        )
    },
    # aminmax(self, *, dim=None, keepdim=False): a min and a max per element (none on integers)
    "aten::aminmax": Reduce(2, 1, 2),
    "aten::logsumexp": Reduce(3, 1, 2),
    **{f"aten::{n}": Reduce(3, 1, 3) for n in ("var", "std", "var_mean", "std_mean")},
    "aten::norm": Reduce(2, 2, 3),
    "aten::linalg_vector_norm": Reduce(2, 2, 3),
    "aten::frobenius_norm": Reduce(2, 1, 2),
}
_SCANS = (
    "aten::cumsum",
    "aten::cumsum_",
    "aten::cumprod",
    "aten::cumprod_",
    "aten::logcumsumexp",
    "aten::cummax",
    "aten::cummin",
)


def reduced_shape(x: Shape, dims: tuple[int, ...] | None, keepdim: bool) -> Shape:
    if not x:
        return ()
    if dims is None or len(dims) == 0:
        dims = tuple(range(len(x)))
    axes = {d % len(x) for d in dims}
    if keepdim:
        return tuple(1 if i in axes else s for i, s in enumerate(x))
    return tuple(s for i, s in enumerate(x) if i not in axes)


def _dims(a: OpArgs, pos: int) -> tuple[int, ...] | None:
    if pos < 0:
        return None
    v = a.value(pos).strip()
    if not v or v == "[]":
        return None
    if v.startswith("["):
        return a.ints(pos)
    # a single dim (an int), or a ScalarType code of the full-reduction overload (sum(self, dtype))
    if pos < len(a.types) and a.types[pos] == "Scalar":
        try:
            return (int(v),)
        except ValueError:
            return None
    return None


def reduction(a: OpArgs) -> OpCost:
    r = _REDUCTIONS[a.name]
    x = a.shape(0)
    dims = _dims(a, r.dim)
    keepdim = a.flag(r.keepdim, False) if r.keepdim >= 0 and dims is not None else False
    out = reduced_shape(x, dims, keepdim)
    dtype = a.dtype(0)
    return a.cost(flops=r.per_element * prod(x), writes=[(out, dtype)], dtype=dtype)


_R.formula(*_REDUCTIONS, family=Family.REDUCTION)(reduction)


@_R.formula(*_SCANS, family=Family.REDUCTION)
def scan(a: OpArgs) -> OpCost:
    x = a.shape(0)
    return a.cost(flops=prod(x), writes=[(x, a.dtype(0))])


@_R.formula("aten::max", "aten::min", family=Family.REDUCTION)
def max_min(a: OpArgs) -> OpCost:
    """Three overloads under one name: elementwise (two tensors), along a dim (values and
    indices), or over everything."""
    x = a.shape(0)
    dtype = a.dtype(0)
    if a.is_tensor(1):
        out = broadcast(x, a.shape(1))
        return a.cost(flops=prod(out), writes=[(out, dtype)])
    if a.value(1):
        out = reduced_shape(x, (a.integer(1),), a.flag(2, False))
        return a.cost(flops=prod(x), writes=[(out, dtype), (out, "int64")])
    if len(a) > 1 and a.types[1] not in ("", "Scalar"):
        raise ArgumentError(f"{a.name}: unexpected arguments")
    return a.cost(flops=prod(x), writes=[((), dtype)])

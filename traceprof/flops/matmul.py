"""Matrix products: mm, addmm, bmm, baddbmm, matmul, linear, _scaled_mm and relatives.

A multiply-accumulate is 2 FLOPs: ``[m, k] @ [k, n]`` is ``m*n*k`` MACs, ``2*m*n*k`` FLOPs. The
bias and the ``beta * input`` term of addmm/baddbmm/linear are not counted, as in
``torch.utils.flop_counter`` (they add ``1/(2k)`` of the product).
"""

from __future__ import annotations

from math import prod

from traceprof.flops.registry import Family, Registry
from traceprof.flops.shapes import ArgumentError, OpArgs, OpCost, broadcast

#: this module's formulas: one of the tables traceprof.flops.REGISTRY is made of
FORMULAS = Registry()
_R = FORMULAS


def _gemm(
    a: OpArgs, macs: int, out_shape: tuple[int, ...], dtype: str | None = None, out_dtype: str | None = None
) -> OpCost:
    dtype = dtype or a.first_dtype()
    return a.cost(flops=2 * macs, macs=macs, writes=[(out_shape, out_dtype or dtype)], dtype=dtype)


def _check(k1: int, k2: int, name: str) -> None:
    if k1 != k2:
        raise ArgumentError(f"{name}: inner dimensions {k1} and {k2} differ")


@_R.formula("aten::mm", "aten::_int_mm", family=Family.MATMUL)
def mm(a: OpArgs) -> OpCost:
    (m, k), (k2, n) = a.shape(0), a.shape(1)
    _check(k, k2, a.name)
    return _gemm(a, m * n * k, (m, n), a.dtype(0), "int32" if a.name.endswith("_int_mm") else None)


@_R.formula("aten::addmm", "aten::_addmm_activation", family=Family.MATMUL)
def addmm(a: OpArgs) -> OpCost:
    (m, k), (k2, n) = a.shape(1), a.shape(2)
    _check(k, k2, a.name)
    return _gemm(a, m * n * k, (m, n), a.dtype(1))


@_R.formula("aten::bmm", family=Family.MATMUL)
def bmm(a: OpArgs) -> OpCost:
    (b, m, k), (b2, k2, n) = a.shape(0), a.shape(1)
    _check(k, k2, a.name)
    return _gemm(a, max(b, b2) * m * n * k, (max(b, b2), m, n), a.dtype(0))


@_R.formula("aten::baddbmm", family=Family.MATMUL)
def baddbmm(a: OpArgs) -> OpCost:
    (b, m, k), (b2, k2, n) = a.shape(1), a.shape(2)
    _check(k, k2, a.name)
    return _gemm(a, max(b, b2) * m * n * k, (max(b, b2), m, n), a.dtype(1))


@_R.formula("aten::addbmm", family=Family.MATMUL)
def addbmm(a: OpArgs) -> OpCost:
    (b, m, k), (_, k2, n) = a.shape(1), a.shape(2)
    _check(k, k2, a.name)
    return _gemm(a, b * m * n * k, (m, n), a.dtype(1))


@_R.formula("aten::mv", family=Family.MATMUL)
def mv(a: OpArgs) -> OpCost:
    (m, k), (k2,) = a.shape(0), a.shape(1)
    _check(k, k2, a.name)
    return _gemm(a, m * k, (m,), a.dtype(0))


@_R.formula("aten::addmv", family=Family.MATMUL)
def addmv(a: OpArgs) -> OpCost:
    (m, k), (k2,) = a.shape(1), a.shape(2)
    _check(k, k2, a.name)
    return _gemm(a, m * k, (m,), a.dtype(1))


@_R.formula("aten::dot", "aten::vdot", family=Family.MATMUL)
def dot(a: OpArgs) -> OpCost:
    (k,), (k2,) = a.shape(0), a.shape(1)
    _check(k, k2, a.name)
    return _gemm(a, k, (), a.dtype(0))


def matmul_macs(x: tuple[int, ...], y: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    """MACs and output shape of ``torch.matmul(x, y)`` with its 1-D and broadcasting rules."""
    if not x or not y:
        raise ArgumentError("matmul of a 0-d tensor")
    xs = (1,) + x if len(x) == 1 else x
    ys = y + (1,) if len(y) == 1 else y
    m, k = xs[-2], xs[-1]
    k2, n = ys[-2], ys[-1]
    _check(k, k2, "aten::matmul")
    batch = broadcast(xs[:-2], ys[:-2])
    out = batch + ((m,) if len(x) > 1 else ()) + ((n,) if len(y) > 1 else ())
    return prod(batch) * m * n * k, out


@_R.formula("aten::matmul", family=Family.MATMUL)
def matmul(a: OpArgs) -> OpCost:
    macs, out = matmul_macs(a.shape(0), a.shape(1))
    return _gemm(a, macs, out, a.dtype(0))


@_R.formula("aten::linear", family=Family.MATMUL)
def linear(a: OpArgs) -> OpCost:
    x, w = a.shape(0), a.shape(1)
    if len(w) == 1:  # F.linear with a 1-D weight: a dot product per row
        w = (1,) + w
    out_features, in_features = w
    if not x or x[-1] != in_features:
        raise ArgumentError(f"{a.name}: input {x} does not fit weight {w}")
    rows = prod(x[:-1])
    return _gemm(a, rows * in_features * out_features, x[:-1] + (out_features,), a.dtype(0))


@_R.formula("aten::_scaled_mm", family=Family.MATMUL)
def scaled_mm(a: OpArgs) -> OpCost:
    """fp8 GEMM: ``_scaled_mm(a, b, scale_a, scale_b, bias, scale_result, out_dtype, ...)``."""
    (m, k), (k2, n) = a.shape(0), a.shape(1)
    _check(k, k2, a.name)
    return _gemm(a, m * n * k, (m, n), a.dtype(0), a.scalar_type(6) or a.dtype(0))


@_R.formula("aten::_grouped_mm", family=Family.MATMUL)
def grouped_mm(a: OpArgs) -> OpCost:
    """``_grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None)``: one product per
    group (mixture-of-experts layers), the groups cut by ``offs``. 2-D x 3-D: ``[T, K]`` rows
    cut into groups times ``[G, K, N]``, out ``[T, N]``; 3-D x 2-D: ``[G, M, K]`` times
    ``[K, N]`` cut along ``N``, out ``[M, N]``; 3-D x 3-D: a batched product; 2-D x 2-D:
    ``[M, K] @ [K, N]`` cut along ``K``, out ``[G, M, N]`` (the weight gradient of the 2-D x
    3-D form). Every row of ``mat_a`` is taken as in a group (``offs`` values are not
    recorded). The backward runs ``_grouped_mm`` twice, counted by this formula."""
    x, y = a.shape(0), a.shape(1)
    out: tuple[int, ...]
    if len(x) == 2 and len(y) == 2:  # [M, K] x [K, N], K split into G groups
        (m, k), (k2, n) = x, y
        _check(k, k2, a.name)
        groups = a.shape(2)[0] if a.is_tensor(2) and a.shape(2) else 1
        macs, out = m * n * k, (groups, m, n)
    elif len(x) == 2 and len(y) == 3:  # [T, K] x [G, K, N]
        (t, k), (_, k2, n) = x, y
        _check(k, k2, a.name)
        macs, out = t * k * n, (t, n)
    elif len(x) == 3 and len(y) == 2:  # [G, M, K] x [K, N_total]
        (_, m, k), (k2, n) = x, y
        _check(k, k2, a.name)
        macs, out = m * k * n, (m, n)
    elif len(x) == 3 and len(y) == 3:  # batched
        (g, m, k), (g2, k2, n) = x, y
        _check(k, k2, a.name)
        if g != g2:
            raise ArgumentError(f"{a.name}: {g} and {g2} groups")
        macs, out = g * m * k * n, (g, m, n)
    else:
        raise ArgumentError(f"{a.name}: shapes {x} and {y}")
    return _gemm(a, macs, out, a.dtype(0))

"""Ops that select, order, count or index: one rule per family (docs/flops.md, "Op families").

- **Selection by value and sorting** (family ``sorting``: ``topk``, ``kthvalue``, ``median``,
  ``mode``, ``sort``, ``argsort``, ``unique``, ``searchsorted``, ``bucketize``, ``histc``...):
  their work is comparing floating-point values, and a comparison is a FLOP, as in ``eq`` or
  ``max`` (1 per element): 1 FLOP per element of the values they compare, a lower bound (a sort
  makes about log2(n) comparisons per element, a binary search log2 of the boundaries; the
  algorithm is the backend's and the trace does not say). On integers and booleans, none (the
  rule of every family outside the matrix ones). Bytes: the input read, the outputs (values,
  int64 indices) written where their size follows from the shapes; ``unique``'s output depends
  on the values and is not counted.
- **Selection by index or mask and index building** (family ``memory``: ``gather``,
  ``index_select``, ``index``, ``take``, ``nonzero``, ``where``, ``masked_fill``, ``one_hot``,
  ``bincount``, ``repeat_interleave``...): no arithmetic on floating-point values, 0 FLOPs
  (``bincount`` with weights adds them: 1 per element); bytes as for copies, the outputs written
  where their size follows from the shapes (not ``nonzero``'s, nor ``index``'s, whose index
  tensors traces record as an unshaped list).

``gather``, ``index_select``, ``scatter*``, ``where`` and ``masked_fill`` have their formulas
beside the other copies (:mod:`.data_movement`, :mod:`.pointwise`); comparisons are pointwise
ops (:mod:`.pointwise`), ``max``/``min`` and ``argmax`` reductions (:mod:`.reduction`).
"""

from __future__ import annotations

from math import prod

from traceprof.flops.registry import Family, Registry
from traceprof.flops.shapes import OpArgs, OpCost, Shape, nbytes

#: this module's formulas: one of the tables traceprof.flops.REGISTRY is made of
FORMULAS = Registry()
_R = FORMULAS

INDEX_DTYPE = "int64"


def _along(x: Shape, dim: int, size: int) -> Shape:
    """``x`` with ``size`` along ``dim``."""
    if not x:
        return ()
    d = dim % len(x)
    return x[:d] + (size,) + x[d + 1 :]


def _reduced(x: Shape, dim: int, keepdim: bool) -> Shape:
    return _along(x, dim, 1) if keepdim else tuple(s for i, s in enumerate(x) if i != dim % max(len(x), 1))


def _compared(a: OpArgs, values: int = 0, outputs: tuple[tuple[Shape, str], ...] = ()) -> OpCost:
    """The sorting family's cost: 1 comparison per element of argument ``values``."""
    x = a.shape(values)
    return a.cost(flops=prod(x), writes=outputs, dtype=a.dtype(values))


# --- selection by value and sorting


@_R.formula("aten::topk", family=Family.SORTING)
def topk(a: OpArgs) -> OpCost:
    """topk(self, k, dim=-1, largest, sorted): the k values and their indices along dim."""
    x = a.shape(0)
    out = _along(x, a.integer(2, -1), a.integer(1))
    return _compared(a, 0, ((out, a.dtype(0)), (out, INDEX_DTYPE)))


@_R.formula("aten::kthvalue", family=Family.SORTING)
def kthvalue(a: OpArgs) -> OpCost:
    """kthvalue(self, k, dim=-1, keepdim=False[, values, indices])"""
    x = a.shape(0)
    out = _reduced(x, a.integer(2, -1), a.flag(3, False))
    return _compared(a, 0, ((out, a.dtype(0)), (out, INDEX_DTYPE)))


@_R.formula("aten::median", "aten::nanmedian", "aten::mode", family=Family.SORTING)
def median(a: OpArgs) -> OpCost:
    """median(self) (one value; mode has no such form), or median / nanmedian / mode(self, dim,
    keepdim[, values, indices]): values and indices along dim."""
    x = a.shape(0)
    if len(a) == 1:
        return _compared(a, 0, (((), a.dtype(0)),))
    out = _reduced(x, a.integer(1, -1), a.flag(2, False))
    return _compared(a, 0, ((out, a.dtype(0)), (out, INDEX_DTYPE)))


@_R.formula("aten::sort", "aten::argsort", "aten::msort", family=Family.SORTING)
def sort(a: OpArgs) -> OpCost:
    """sort(self, dim, descending) or sort(self, stable, dim, descending): the sorted values
    and their indices; argsort the indices; msort the values (along dim 0)."""
    x = a.shape(0)
    if a.name == "aten::argsort":
        outputs: tuple[tuple[Shape, str], ...] = ((x, INDEX_DTYPE),)
    elif a.name == "aten::msort":
        outputs = ((x, a.dtype(0)),)
    else:
        outputs = ((x, a.dtype(0)), (x, INDEX_DTYPE))
    return _compared(a, 0, outputs)


@_R.formula(
    "aten::unique",
    "aten::_unique",
    "aten::_unique2",
    "aten::unique_dim",
    "aten::unique_consecutive",
    "aten::unique_dim_consecutive",
    family=Family.SORTING,
)
def unique(a: OpArgs) -> OpCost:
    """unique*(self, ...): the values compared; its outputs' size depends on them (not counted)."""
    return _compared(a, 0)


@_R.formula("aten::searchsorted", family=Family.SORTING)
def searchsorted(a: OpArgs) -> OpCost:
    """searchsorted(sorted_sequence, self, ...): each value of self compared (self may be a
    number: one value); an int64 (or int32) position per value."""
    values = a.shape(1) if a.is_tensor(1) else ()
    dtype = a.dtype(1) if a.is_tensor(1) else a.dtype(0)
    return a.cost(flops=prod(values), writes=[(values, INDEX_DTYPE)], dtype=dtype)


@_R.formula("aten::bucketize", family=Family.SORTING)
def bucketize(a: OpArgs) -> OpCost:
    """bucketize(self, boundaries, out_int32, right): a bucket per value of self (a number:
    one)."""
    values = a.shape(0) if a.is_tensor(0) else ()
    dtype = a.dtype(0) if a.is_tensor(0) else a.dtype(1)
    return a.cost(flops=prod(values), writes=[(values, INDEX_DTYPE)], dtype=dtype)


@_R.formula("aten::histc", family=Family.SORTING)
def histc(a: OpArgs) -> OpCost:
    """histc(self, bins, min, max): each value placed in a bin; ``bins`` counts written."""
    return _compared(a, 0, (((a.integer(1, 100),), a.dtype(0)),))


@_R.formula("aten::histogram", "aten::_histogramdd_from_bin_cts", family=Family.SORTING)
def histogram(a: OpArgs) -> OpCost:
    """histogram(self, bins, ...): each value placed in a bin (the bins' count is a tensor or
    a number; the counts written are not counted)."""
    return _compared(a, 0)


# --- selection by index or mask, index building: no FLOPs, bytes


@_R.formula("aten::index", "aten::_unsafe_index", family=Family.MEMORY)
def index(a: OpArgs) -> OpCost:
    """index(self, indices): the index tensors are a list traces record without shapes, so
    the output's size is unknown: no bytes counted."""
    a.shape(0)
    return a.cost(flops=0, reads=0.0, dtype=a.dtype(0))


@_R.formula("aten::nonzero", "aten::nonzero_static", "aten::argwhere", family=Family.MEMORY)
def nonzero(a: OpArgs) -> OpCost:
    """nonzero(self): every element read; the positions written depend on the values."""
    x = a.shape(0)
    return a.cost(flops=0, reads=nbytes(x, a.dtype(0)), dtype=a.dtype(0))


@_R.formula("aten::take", "aten::take_along_dim", family=Family.MEMORY)
def take(a: OpArgs) -> OpCost:
    """take(self, index) / take_along_dim(self, indices, dim): one element per index, as
    gather."""
    idx = a.shape(1)
    reads = nbytes(idx, a.dtype(1)) + nbytes(idx, a.dtype(0))
    return a.cost(flops=0, reads=reads, writes=[(idx, a.dtype(0))], dtype=a.dtype(0))


@_R.formula("aten::one_hot", family=Family.MEMORY)
def one_hot(a: OpArgs) -> OpCost:
    """one_hot(self, num_classes=-1): an int64 row of num_classes per index (-1: as many as the
    largest index says, unknown from shapes: not counted)."""
    idx = a.shape(0)
    classes = a.integer(1, -1)
    writes = [(idx + (classes,), INDEX_DTYPE)] if classes >= 0 else []
    return a.cost(flops=0, reads=nbytes(idx, a.dtype(0)), writes=writes, dtype=INDEX_DTYPE)


@_R.formula("aten::bincount", family=Family.MEMORY)
def bincount(a: OpArgs) -> OpCost:
    """bincount(self, weights=None, minlength=0): one count per index, or one add of its weight
    (floating-point: 1 FLOP each); the counts written depend on the largest index."""
    idx = a.shape(0)
    if a.is_tensor(1):
        return a.cost(flops=prod(idx), dtype=a.dtype(1))
    return a.cost(flops=0, dtype=INDEX_DTYPE)


@_R.formula("aten::repeat_interleave", family=Family.MEMORY)
def repeat_interleave(a: OpArgs) -> OpCost:
    """repeat_interleave(self, repeats, dim=None, output_size=None) with a number of repeats:
    ``self`` repeated along dim (flattened without one); with a tensor of repeats, or the
    index-building form repeat_interleave(repeats), the output's size depends on the values."""
    if not a.is_tensor(0) or a.is_tensor(1) or not a.value(1):
        return a.cost(flops=0, reads=0.0, dtype=INDEX_DTYPE if not a.is_tensor(0) else a.dtype(0))
    x, repeats = a.shape(0), a.integer(1)
    dim = a.value(2)
    out = (prod(x) * repeats,) if dim in ("", "None") else _along(x, int(dim), x[int(dim) % len(x)] * repeats)
    return a.cost(flops=0, reads=nbytes(x, a.dtype(0)), writes=[(out, a.dtype(0))], dtype=a.dtype(0))

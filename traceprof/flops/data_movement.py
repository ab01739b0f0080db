"""Data movement (copies, fills, concatenation, gathers, scatters), embeddings, and the ops
that cost nothing themselves (views, allocation, wrappers, communication).

Copies and gathers count no FLOPs, only bytes: every tensor read once, every output written
once. An embedding lookup reads the indices and the rows it gathers (not the whole table) and
writes them; its backward adds each gradient row into the table (one FLOP per element).
"""

from __future__ import annotations

from math import prod

from traceprof.flops.registry import Family, Registry
from traceprof.flops.shapes import LIST_DTYPE, ArgumentError, OpArgs, OpCost, nbytes

#: this module's formulas: one of the tables traceprof.flops.REGISTRY is made of
FORMULAS = Registry()
_R = FORMULAS


@_R.formula("aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize", family=Family.MEMORY)
def copy(a: OpArgs) -> OpCost:
    """copy_(self, src): reads src, writes self."""
    dst, src = a.shape(0), a.shape(1)
    return a.cost(flops=0, reads=nbytes(src, a.dtype(1)), writes=[(dst, a.dtype(0))])


@_R.formula("aten::_pin_memory", family=Family.MEMORY)
def pin_memory(a: OpArgs) -> OpCost:
    """_pin_memory(self, device?): a copy of self into page-locked host memory."""
    x = a.shape(0)
    return a.cost(flops=0, reads=nbytes(x, a.dtype(0)), writes=[(x, a.dtype(0))])


@_R.formula("aten::fill_", "aten::zero_", "aten::fill", family=Family.MEMORY)
def fill(a: OpArgs) -> OpCost:
    x = a.shape(0)
    return a.cost(flops=0, reads=0.0, writes=[(x, a.dtype(0))])


@_R.formula(
    "aten::cat",
    "aten::_cat",
    "aten::concat",
    "aten::concatenate",
    "aten::stack",
    "aten::hstack",
    "aten::vstack",
    family=Family.MEMORY,
)
def concatenate(a: OpArgs) -> OpCost:
    """cat(tensors, dim): list elements are taken as fp32 (traces give no list dtype)."""
    shapes = a.tensor_list(0)
    total = sum(prod(s) for s in shapes)
    return a.cost(flops=0, writes=[((total,), LIST_DTYPE)], dtype=LIST_DTYPE)


@_R.formula("aten::index_select", family=Family.MEMORY)
def index_select(a: OpArgs) -> OpCost:
    """index_select(self, dim, index): reads the index and the selected slices."""
    x, idx = a.shape(0), a.shape(2)
    dim = a.integer(1) % max(len(x), 1)
    out = x[:dim] + (prod(idx),) + x[dim + 1 :] if x else ()
    reads = nbytes(idx, a.dtype(2)) + nbytes(out, a.dtype(0))
    return a.cost(flops=0, reads=reads, writes=[(out, a.dtype(0))], dtype=a.dtype(0))


@_R.formula("aten::gather", family=Family.MEMORY)
def gather(a: OpArgs) -> OpCost:
    """gather(self, dim, index): the output has the index's shape."""
    idx = a.shape(2)
    reads = nbytes(idx, a.dtype(2)) + nbytes(idx, a.dtype(0))
    return a.cost(flops=0, reads=reads, writes=[(idx, a.dtype(0))], dtype=a.dtype(0))


@_R.formula(
    "aten::scatter",
    "aten::scatter_",
    "aten::scatter_add",
    "aten::scatter_add_",
    "aten::scatter_reduce",
    "aten::scatter_reduce_",
    "aten::index_add",
    "aten::index_add_",
    "aten::index_copy",
    "aten::index_copy_",
    family=Family.MEMORY,
)
def scatter(a: OpArgs) -> OpCost:
    """scatter*(self, dim, index, src ...) / index_add(self, dim, index, source): reads the index
    and the source, writes as many elements (one add each for the accumulating forms)."""
    idx = a.shape(2)
    src = a.shape(3) if a.is_tensor(3) else idx
    adds = prod(src) if ("add" in a.name or "reduce" in a.name) else 0
    reads = nbytes(idx, a.dtype(2)) + (nbytes(src, a.dtype(3)) if a.is_tensor(3) else 0)
    return a.cost(flops=adds, reads=reads, writes=[(src, a.dtype(0))], dtype=a.dtype(0))


@_R.formula("aten::index_put_", "aten::index_put", "aten::_index_put_impl_", family=Family.MEMORY)
def index_put(a: OpArgs) -> OpCost:
    """index_put_(self, indices, values, accumulate): writes the values (the index tensors are
    a list whose shapes traces do not record)."""
    values = a.shape(2)
    adds = prod(values) if a.flag(3, False) else 0
    return a.cost(
        flops=adds, reads=nbytes(values, a.dtype(2)), writes=[(values, a.dtype(0))], dtype=a.dtype(0)
    )


@_R.formula("aten::_unsafe_masked_index_put_accumulate", family=Family.MEMORY)
def masked_index_put_accumulate(a: OpArgs) -> OpCost:
    """_unsafe_masked_index_put_accumulate(self, mask, indices, values): Inductor's
    decomposition of an accumulating index_put (an embedding's backward in compiled graphs): one
    add per value."""
    values = a.shape(3)
    return a.cost(
        flops=prod(values), reads=nbytes(values, a.dtype(3)), writes=[(values, a.dtype(0))], dtype=a.dtype(0)
    )


@_R.formula(
    "aten::tril",
    "aten::tril_",
    "aten::triu",
    "aten::triu_",
    "aten::flip",
    "aten::roll",
    "aten::masked_select",
    family=Family.MEMORY,
)
def rewrite(a: OpArgs) -> OpCost:
    x = a.shape(0)
    return a.cost(flops=0, writes=[(x, a.dtype(0))])


@_R.formula("aten::repeat", family=Family.MEMORY)
def repeat(a: OpArgs) -> OpCost:
    """repeat(self, repeats)"""
    x, reps = a.shape(0), a.ints(1)
    if len(reps) < len(x):
        raise ArgumentError(f"{a.name}: {len(reps)} repeats for {len(x)} dimensions")
    out = tuple(r * s for r, s in zip(reps, (1,) * (len(reps) - len(x)) + x))
    return a.cost(flops=0, writes=[(out, a.dtype(0))])


# --- embeddings


@_R.formula("aten::embedding", family=Family.EMBEDDING)
def embedding(a: OpArgs) -> OpCost:
    """embedding(weight, indices, ...): no FLOPs; reads the indices and the rows they pick."""
    w, idx = a.shape(0), a.shape(1)
    if not w:
        raise ArgumentError(f"{a.name}: 0-d weight")
    out = idx + w[1:]
    dtype = a.dtype(0)
    reads = nbytes(idx, a.dtype(1)) + nbytes(out, dtype)
    return a.cost(flops=0, reads=reads, writes=[(out, dtype)], dtype=dtype)


@_R.formula("aten::embedding_dense_backward", family=Family.EMBEDDING)
def embedding_dense_backward(a: OpArgs) -> OpCost:
    """embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale): each
    gradient row is added into a zeroed [num_weights, dim] gradient."""
    g = a.shape(0)
    rows = a.integer(2)
    return a.cost(flops=prod(g), writes=[((rows,) + g[-1:], a.dtype(0))])


@_R.formula("aten::_embedding_bag", "aten::_embedding_bag_forward_only", family=Family.EMBEDDING)
def embedding_bag(a: OpArgs) -> OpCost:
    """_embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
    per_sample_weights, include_last_offset, ...): sums (or averages) the picked rows per bag."""
    w, idx, offsets = a.shape(0), a.shape(1), a.shape(2)
    dim = prod(w[1:])
    bags = prod(offsets) - (1 if a.flag(7, False) else 0) if offsets else 1
    picked = prod(idx) * dim
    dtype = a.dtype(0)
    reads = nbytes(idx, a.dtype(1)) + nbytes(offsets, a.dtype(2)) + picked * nbytes((1,), dtype)
    return a.cost(flops=picked, reads=reads, writes=[((bags, dim), dtype)], dtype=dtype)


@_R.formula("aten::_embedding_bag_dense_backward", family=Family.EMBEDDING)
def embedding_bag_backward(a: OpArgs) -> OpCost:
    """_embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
    num_weights, ...)"""
    g, idx = a.shape(0), a.shape(1)
    dim = g[-1] if g else 1
    return a.cost(flops=prod(idx) * dim, writes=[((a.integer(5), dim), a.dtype(0))])


# --- zero-FLOP ops: no cost of their own, never unsupported
#
# Views, metadata and predicates compute nothing and move no bytes; allocation writes nothing
# itself (a fill_ or copy_ inside it does, and is counted); wrappers run the ops that do their
# work (counted inside them). ``aten::item`` / ``_local_scalar_dense`` copy one element to the
# host: no FLOPs, and the few bytes are not counted.

#: views and reshapes: a new tensor header over the same storage
VIEW_OPS = (
    "view",
    "_unsafe_view",
    "view_as",
    "reshape",
    "reshape_as",
    "_reshape_alias",
    "flatten",
    "unflatten",
    "ravel",
    "squeeze",
    "squeeze_",
    "unsqueeze",
    "unsqueeze_",
    "t",
    "t_",
    "transpose",
    "transpose_",
    "permute",
    "movedim",
    "moveaxis",
    "swapaxes",
    "swapdims",
    "numpy_T",
    "T",
    "mT",
    "H",
    "mH",
    "adjoint",
    "matrix_H",
    "expand",
    "expand_as",
    "as_strided",
    "as_strided_",
    "slice",
    "select",
    "narrow",
    "split",
    "split_with_sizes",
    "tensor_split",
    "unsafe_split",
    "unsafe_split_with_sizes",
    "chunk",
    "unsafe_chunk",
    "hsplit",
    "vsplit",
    "dsplit",
    "unbind",
    "unfold",
    "diagonal",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "alias",
    "detach",
    "detach_",
    "lift",
    "lift_fresh",
    "lift_fresh_copy",
    "broadcast_tensors",
    "broadcast_to",
    "meshgrid",
    "conj",
    "_conj",
    "resolve_conj",
    "resolve_neg",
    "_neg_view",
    "positive",
    "view_as_real",
    "view_as_complex",
    "real",
    "imag",
    "set_",
    "align_as",
    "type_as",
    "_indices",
    "_values",
    "indices",
    "values",
    "crow_indices",
    "col_indices",
    "ccol_indices",
    "row_indices",
    "_nested_view_from_buffer",
    "_reshape_from_tensor",
    "_fw_primal",
    "_make_dual",
    "_unpack_dual",
    "data",
    "unflatten_dense_tensors",
    "_nested_tensor_from_mask",
)
#: metadata queries, predicates and autograd bookkeeping
METADATA_OPS = (
    "size",
    "stride",
    "numel",
    "dim",
    "storage_offset",
    "result_type",
    "can_cast",
    "promote_types",
    "_has_compatible_shallow_copy_type",
    "_has_same_storage_numel",
    "_debug_has_internal_overlap",
    "cudnn_is_acceptable",
    "_nnpack_available",
    "_is_zerotensor",
    "_shape_as_tensor",
    "output_nr",
    "_version",
    "requires_grad_",
    "retain_grad",
    "retains_grad",
    "_assert_tensor_metadata",
    "_make_dep_token",
    "_nested_tensor_size",
    "_nested_tensor_strides",
    "_nested_tensor_storage_offsets",
    "item",
    "_local_scalar_dense",
    "record_stream",
)
#: allocation (what they write is done by fill_/copy_ inside, or left uninitialised)
ALLOCATION_OPS = (
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "resize_",
    "resize_as_",
    "_resize_output_",
    "zeros",
    "zeros_like",
    "ones",
    "ones_like",
    "full",
    "full_like",
    "new_zeros",
    "new_ones",
    "new_full",
    "scalar_tensor",
    "tensor",
    "arange",
    "linspace",
    "randn",
    "rand",
    "randint",
    "randperm",
    "randn_like",
    "rand_like",
    "randint_like",
    "normal",
    "eye",
)
#: wrappers whose work is done by the ops inside them
WRAPPER_OPS = (
    "to",
    "_to_copy",
    "contiguous",
    "clone",
    "copy",
    "pad",
    "constant_pad_nd",
    "embedding_backward",
    "embedding_bag",
    "_embedding_bag_backward",
    "_autocast_to_reduced_precision",
    "_autocast_to_full_precision",
    "_pack_padded_sequence",
    "_pad_packed_sequence",
    "_thnn_differentiable_lstm_cell_backward",
    "_thnn_differentiable_gru_cell_backward",
    "einsum",
    "tensordot",
    "sum_to_size",
    "flatten_dense_tensors",
    "pin_memory",
    # the backward of a view: a zero-filled tensor with the gradient copied into the view
    "select_backward",
    "slice_backward",
    "diagonal_backward",
    # the backward of max/min/topk/median along a dim: a zero-filled gradient and a scatter_
    "value_selecting_reduction_backward",
)
#: name prefixes of zero-FLOP families: predicates (``aten::is_contiguous``, ``is_nonzero``...,
#: ``_use_cudnn_ctc_loss``...), allocation (``aten::empty_permuted``,
#: ``_empty_affine_quantized``), symbolic sizes (``sym_size``, ``sym_constrain_range``)
ZERO_FLOP_PREFIXES = (
    "aten::is_",
    "aten::_use_cudnn_",
    "aten::empty",
    "aten::_empty_",
    "aten::sym_",
    "aten::_functional_sym_constrain_range",
)

_R.no_cost(*(f"aten::{n}" for n in VIEW_OPS + METADATA_OPS + ALLOCATION_OPS + WRAPPER_OPS))
_R.no_cost_prefix(*ZERO_FLOP_PREFIXES)
# collective communication: no FLOPs counted (its GPU time is not a gap in FLOP coverage)
_R.no_cost_namespace("c10d", "_c10d_functional", "c10d_functional", "_dtensor", "profiler")
_R.no_cost_prefix("nccl:", "gloo:", "mpi:", "ucc:", "xccl:")
_R.no_cost("record_param_comms")

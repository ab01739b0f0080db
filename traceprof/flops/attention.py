"""Scaled dot-product attention in all its fused forms, forward and backward.

For query ``[b, h_q, s_q, d]``, key ``[b, h_kv, s_k, d]`` and value ``[b, h_kv, s_k, d_v]``
(grouped-query attention: ``h_q`` a multiple of ``h_kv``), with ``P`` query-key pairs per head:

- forward: ``Q @ K^T`` and ``A @ V``: ``b * h_q * P * (d + d_v)`` MACs;
- backward (fused kernels recompute the scores): ``Q @ K^T`` again, ``dO @ V^T``, ``A^T @ dO``,
  ``dS @ K`` and ``dS^T @ Q``: ``b * h_q * P * (3 d + 2 d_v)`` MACs.

``P = s_q * s_k``; with ``is_causal`` only the unmasked pairs count (the kernels skip the masked
blocks): query ``i`` sees keys ``0..i`` (top-left aligned, PyTorch's ``is_causal``), or the last
``i + s_k - s_q + 1`` keys for the bottom-right mask of ``_efficient_attention`` type 2. Softmax,
scaling and dropout inside the kernels are not counted. This is ``torch.utils.flop_counter``'s
count, except for causal attention, which it counts as if unmasked.

``aten::scaled_dot_product_attention`` itself has no formula: the backend op inside it is
counted; the math fallback (``_scaled_dot_product_attention_math``) is counted through the
matmuls, softmax and dropout it runs.
"""

from __future__ import annotations

from typing import NamedTuple

from traceprof.flops.registry import Family, Registry
from traceprof.flops.shapes import ArgumentError, OpArgs, OpCost, Shape

#: this module's formulas: one of the tables traceprof.flops.REGISTRY is made of
FORMULAS = Registry()
_R = FORMULAS

NO_MASK, TOP_LEFT, BOTTOM_RIGHT = 0, 1, 2


def attention_pairs(s_q: int, s_k: int, mask: int = NO_MASK) -> int:
    """Query-key pairs computed per head."""
    if mask == NO_MASK:
        return s_q * s_k
    shift = 0 if mask == TOP_LEFT else s_k - s_q
    # query i sees min(s_k, max(0, i + shift + 1)) keys
    lo = max(0, -shift)  # first query that sees a key
    if lo >= s_q:
        return 0
    full = max(lo, min(s_q, s_k - shift))  # from here on a query sees all s_k keys
    # queries lo..full-1 see i + shift + 1 keys: an arithmetic series
    first, last = lo + shift + 1, full - 1 + shift + 1
    partial = (first + last) * (full - lo) // 2 if full > lo else 0
    return partial + (s_q - full) * s_k


class Layout(NamedTuple):
    q: int  # position of the query; key and value follow it
    grad_out: int  # position of the output gradient (backward ops), -1 for forward ops
    causal: int  # position of is_causal / custom_mask_type
    mask_is_type: bool  # the causal argument is _efficient_attention's custom_mask_type
    seq_first: bool  # [b, s, h, d] instead of [b, h, s, d]
    cum_seq: int  # position of the cumulative sequence lengths of variable-length batches, -1


_FORWARD = {
    "aten::_scaled_dot_product_flash_attention": Layout(0, -1, 4, False, False, -1),
    "aten::_scaled_dot_product_flash_attention_for_cpu": Layout(0, -1, 4, False, False, -1),
    "aten::_scaled_dot_product_efficient_attention": Layout(0, -1, 6, False, False, -1),
    "aten::_scaled_dot_product_cudnn_attention": Layout(0, -1, 6, False, False, -1),
    "aten::_scaled_dot_product_fused_attention_overrideable": Layout(0, -1, 5, False, False, -1),
    "aten::_flash_attention_forward": Layout(0, -1, 8, False, True, 3),
    "aten::_efficient_attention_forward": Layout(0, -1, 9, True, True, 4),
}
_BACKWARD = {
    "aten::_scaled_dot_product_flash_attention_backward": Layout(1, 0, 11, False, False, -1),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": Layout(1, 0, 7, False, False, -1),
    "aten::_scaled_dot_product_efficient_attention_backward": Layout(1, 0, 11, False, False, -1),
    "aten::_scaled_dot_product_cudnn_attention_backward": Layout(1, 0, 14, False, False, -1),
    "aten::_scaled_dot_product_fused_attention_overrideable_backward": Layout(1, 0, 13, False, False, -1),
    "aten::_flash_attention_backward": Layout(1, 0, 11, False, True, 6),
    "aten::_efficient_attention_backward": Layout(1, 0, 14, True, True, 6),
}


def _bhsd(a: OpArgs, i: int, lay: Layout) -> Shape:
    s = a.shape(i)
    if lay.seq_first and len(s) == 4:
        b, seq, h, d = s
        return (b, h, seq, d)
    if lay.seq_first and len(s) == 3 and lay.cum_seq >= 0 and a.is_tensor(lay.cum_seq):
        # variable-length batch [total, h, d] with B + 1 offsets: taken as B sequences of equal
        # length (the fewest pairs for that total, so a lower bound)
        (batches,) = a.shape(lay.cum_seq)
        total, h, d = s
        batches = max(batches - 1, 1)
        return (batches, h, total // batches, d)
    if len(s) != 4:
        raise ArgumentError(f"{a.name}: argument {i} has shape {s}, expected 4 dimensions")
    return s


def _mask(a: OpArgs, lay: Layout) -> int:
    if lay.mask_is_type:
        kind = a.integer(lay.causal, NO_MASK)
        return kind if kind in (TOP_LEFT, BOTTOM_RIGHT) else NO_MASK
    return TOP_LEFT if a.flag(lay.causal, False) else NO_MASK


def _shapes(a: OpArgs, lay: Layout):
    q, k, v = (_bhsd(a, lay.q + j, lay) for j in range(3))
    b, h_q, _s_q, d = q
    b2, h_kv, s_k, d2 = k
    b3, h_v, s_v, _d_v = v
    if not (b == b2 == b3 and d == d2 and h_kv == h_v and s_k == s_v) or h_kv == 0 or h_q % h_kv:
        raise ArgumentError(f"{a.name}: query {q}, key {k} and value {v} do not fit")
    return q, k, v


def attention_forward(a: OpArgs) -> OpCost:
    lay = _FORWARD[a.name]
    (b, h_q, s_q, d), k, v = _shapes(a, lay)
    d_v = v[3]
    macs = b * h_q * attention_pairs(s_q, k[2], _mask(a, lay)) * (d + d_v)
    dtype = a.dtype(lay.q)
    out = a.shape(lay.q)[:-1] + (d_v,)
    return a.cost(flops=2 * macs, macs=macs, writes=[(out, dtype)], dtype=dtype)


def attention_backward(a: OpArgs) -> OpCost:
    lay = _BACKWARD[a.name]
    (b, h_q, s_q, d), k, v = _shapes(a, lay)
    d_v = v[3]
    macs = b * h_q * attention_pairs(s_q, k[2], _mask(a, lay)) * (3 * d + 2 * d_v)
    dtype = a.dtype(lay.q)
    writes = [(a.shape(lay.q + j), a.dtype(lay.q + j)) for j in range(3)]
    return a.cost(flops=2 * macs, macs=macs, writes=writes, dtype=dtype)


_R.formula(*_FORWARD, family=Family.ATTENTION)(attention_forward)
_R.formula(*_BACKWARD, family=Family.ATTENTION)(attention_backward)
_R.no_cost(
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_attention_math",
    "aten::_scaled_dot_product_attention_math_for_mps",
    "aten::_fused_sdp_choice",
)

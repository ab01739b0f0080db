"""The aten ops a GPT's training step calls, one builder each: the op subtree that
``torch.profiler`` records for one call (the composite op and the ops it dispatches to, the
allocations, the kernels it launches, as :mod:`traceprof.testing.program` nodes) and the
autograd node it creates. :mod:`traceprof.testing.gpt` puts them together into the model.
"""

from __future__ import annotations

from collections.abc import Sequence

from traceprof.testing.kernels import GEMM_FLOPS_PER_NS, K, ew_ns
from traceprof.testing.program import (
    FLOAT,
    LONG,
    PEEK,
    TAKE,
    Alloc,
    Arg,
    Grad,
    Launch,
    Node,
    Op,
    Tn,
    ins,
)


def gemm(kname: str, m: int, n: int, k: int, api: str = "cudaLaunchKernelExC") -> Launch:
    """A cuBLAS GEMM (m x k) @ (k x n): compute-bound."""
    dur = 4000 + 2 * m * n * k / GEMM_FLOPS_PER_NS
    return Launch(
        kname,
        dur,
        api=api,
        grid=(max(1, n // 256), max(1, m // 128), 1),
        block=(384, 1, 1),
        regs=168,
        smem=213248,
    )


def ew(kname: str, nbytes: int, numel: int) -> Launch:
    """An elementwise kernel over numel elements moving nbytes: memory-bound."""
    return Launch(
        kname, ew_ns(nbytes), grid=(max(1, min(numel // 1024, 1 << 20)), 1, 1), block=(128, 1, 1), regs=28
    )


def t_op(w: Tn, seq: int | None = None, grad: Grad | None = None) -> tuple[Op, Tn]:
    """aten::t > aten::transpose > aten::as_strided (a view, no kernel)."""
    r, c = w.shape
    tw = Tn(c, r, dtype=w.dtype, strides=[1, c])
    return Op(
        "aten::t", ins(w), [transpose_op(w, (0, 1), [c, r], [1, c], 700)], seq=seq, grad=grad, cost=900
    ), tw


def transpose_op(
    x: Tn,
    dims: tuple[int, int],
    shape: list[int],
    strides: list[int],
    cost: int,
    seq: int | None = None,
    grad: Grad | None = None,
) -> Op:
    """aten::transpose > aten::as_strided (a view, no kernel): ``x`` with ``dims`` swapped, the
    view of ``shape`` and ``strides``."""
    view = Op("aten::as_strided", ins(x, shape, strides, None), cost=300)
    return Op("aten::transpose", ins(x, *dims), [view], seq=seq, grad=grad, cost=cost)


def view_op(
    x: Tn, shape: Sequence[int], seq: int = TAKE, name: str = "aten::view", grad_name: str = "ViewBackward0"
) -> tuple[Op, Tn]:
    """A view op (no kernel); it creates an autograd node when it takes a sequence number."""
    y = Tn(*shape, dtype=x.dtype)
    g = (
        Grad(
            grad_name,
            ins(y),
            [
                Op(
                    "aten::reshape",
                    ins(y, list(x.shape)),
                    [Op("aten::view", ins(y, list(x.shape)), cost=500)],
                    cost=800,
                )
            ],
        )
        if seq == TAKE
        else None
    )
    return Op(name, ins(x, list(shape)), seq=seq, grad=g, cost=700), y


def empty(name: str, t: Tn, *extra: Arg) -> Op:
    """An allocating op (aten::empty, empty_like, ...) of a tensor like t; extra: its arguments
    when not aten::empty's."""
    return Op(
        name, ins(*extra) if extra else ins(list(t.shape), 15, 0, None, None, 0), [Alloc(t.nbytes)], cost=1500
    )


def _matmul_backward(x2: Tn, w: Tn, wt: Tn, y2: Tn) -> list[Node]:
    """The backward of ``y2 = x2 @ wt`` (``wt`` the transpose of the weight ``w``): the input's
    gradient, then the weight's, with the transposes autograd records around them."""
    m, fin = x2.shape
    fout = w.shape[0]
    return [
        t_op(wt)[0],
        Op("aten::mm", ins(y2, w), [Alloc(x2.nbytes), gemm(K["gemm_nn"], m, fin, fout)], cost=5000),
        t_op(Tn(fout, m))[0],
        Op(
            "aten::mm",
            ins(Tn(fout, m, strides=[1, fout]), x2),
            [Alloc(w.nbytes), gemm(K["gemm_nt"], fout, fin, m)],
            cost=5000,
        ),
        t_op(Tn(fout, fin))[0],
    ]


def linear(x: Tn, w: Tn, bias: Tn | None) -> tuple[Op, Tn]:
    """nn.Linear on a (B, T, in) input: aten::linear folding the batch dims into aten::addmm."""
    B, T, fin = x.shape
    fout = w.shape[0]
    m = B * T
    x2, y2, y = Tn(m, fin), Tn(m, fout), Tn(B, T, fout)
    t, wt = t_op(w, seq=TAKE, grad=None)
    t.grad = Grad("TBackward0", ins(Tn(fin, fout)), [t_op(Tn(fin, fout))[0]], params=[w])
    v_in, _ = view_op(x, [m, fin])
    if bias is not None:
        bias_grad: list[Node] = [
            Op(
                "aten::sum",
                ins(y2, [0], True, None),
                [Alloc(bias.nbytes), ew(K["sum"], y2.nbytes, y2.numel)],
                cost=4000,
            ),
            Op("aten::view", ins(Tn(1, fout), [fout]), cost=500),
        ]
        mm = Op(
            "aten::addmm",
            ins(bias, x2, wt, 1, 1),
            [Alloc(y2.nbytes), gemm(K["gemm_tn"], m, fout, fin)],
            seq=TAKE,
            cost=6000,
            grad=Grad("AddmmBackward0", ins(y2), _matmul_backward(x2, w, wt, y2) + bias_grad, params=[bias]),
        )
        v_out, _ = view_op(y2, [B, T, fout])
        return Op("aten::linear", ins(x, w, bias), [t, v_in, mm, v_out], seq=PEEK, cost=2500), y
    # no bias (lm_head): aten::matmul > view, mm, _unsafe_view
    mm = Op(
        "aten::mm",
        ins(x2, wt),
        [Alloc(y2.nbytes), gemm(K["gemm_tn"], m, fout, fin)],
        seq=TAKE,
        cost=5000,
        grad=Grad("MmBackward0", ins(y2), _matmul_backward(x2, w, wt, y2)),
    )
    uv, _ = view_op(y2, [B, T, fout], name="aten::_unsafe_view", grad_name="UnsafeViewBackward0")
    matmul = Op("aten::matmul", ins(x, wt), [v_in, mm, uv], seq=PEEK, cost=2500)
    return Op("aten::linear", ins(x, w, None), [t, matmul], seq=PEEK, cost=2500), y


def layer_norm(x: Tn) -> Op:
    """nn.LayerNorm over the last dimension."""
    C = x.shape[-1]
    w, b = Tn(C), Tn(C)
    rows = x.numel // C
    stats = Tn(rows, 1, dtype=FLOAT)
    native = Op(
        "aten::native_layer_norm",
        ins(x, [C], w, b, 1e-05),
        [
            empty("aten::empty_like", x, x, None, None, None, None, None),
            empty("aten::empty", stats),
            empty("aten::empty", stats),
            Launch(K["ln_fwd"], ew_ns(2 * x.nbytes), grid=(rows, 1, 1), block=(32, 4, 1), regs=40),
        ],
        seq=TAKE,
        cost=3000,
        grad=Grad(
            "NativeLayerNormBackward0",
            ins(x),
            [
                Op(
                    "aten::native_layer_norm_backward",
                    ins(x, x, [C], stats, stats, w, b, [True, True, True]),
                    [
                        empty("aten::empty_like", x, x, None, None, None, None, None),
                        empty("aten::empty_like", w, w, None, None, None, None, None),
                        empty("aten::empty_like", b, b, None, None, None, None, None),
                        Launch(
                            K["ln_bwd_in"], ew_ns(3 * x.nbytes), grid=(rows, 1, 1), block=(32, 4, 1), regs=48
                        ),
                        Launch(
                            K["ln_bwd_gb"],
                            ew_ns(2 * x.nbytes),
                            grid=(C // 32, 1, 1),
                            block=(32, 32, 1),
                            regs=64,
                        ),
                    ],
                    cost=6000,
                )
            ],
            params=[w, b],
        ),
    )
    return Op("aten::layer_norm", ins(x, [C], w, b, 1e-05, True), [native], seq=PEEK, cost=1500)


def dropout(x: Tn, p: float = 0.1) -> Op:
    """nn.Dropout in training mode (a mask kernel forward, a masked scale backward)."""
    mask = Tn(*x.shape, dtype="bool")
    native = Op(
        "aten::native_dropout",
        ins(x, p, True),
        [
            empty("aten::empty_like", x, x, None, None, None, None, None),
            empty("aten::empty", mask),
            ew(K["drop_fwd"], x.nbytes * 2 + mask.nbytes, x.numel),
        ],
        seq=TAKE,
        cost=3000,
        grad=Grad(
            "NativeDropoutBackward0",
            ins(x),
            [
                Op(
                    "aten::native_dropout_backward",
                    ins(x, mask, 1 / (1 - p)),
                    [Alloc(x.nbytes), ew(K["drop_bwd"], x.nbytes * 2 + mask.nbytes, x.numel)],
                    cost=3000,
                )
            ],
        ),
    )
    return Op("aten::dropout", ins(x, p, True), [native], seq=PEEK, cost=1200)


def add(x: Tn) -> Op:
    """A residual add."""
    return Op(
        "aten::add",
        ins(x, x, 1),
        [Alloc(x.nbytes), ew(K["add"], 3 * x.nbytes, x.numel)],
        seq=TAKE,
        cost=3000,
        grad=Grad("AddBackward0", ins(x)),
    )


def embedding(w: Tn, idx: Tn) -> tuple[Op, Tn]:
    """nn.Embedding: an index_select forward, a sort + scatter backward."""
    out = Tn(*idx.shape, w.shape[1])
    flat = Tn(idx.numel, dtype=LONG)
    V, C = w.shape
    sort_idx = Tn(idx.numel, dtype=LONG)
    bwd = Op(
        "aten::embedding_backward",
        ins(out, idx, V, -1, False, False),
        [
            Op(
                "aten::embedding_dense_backward",
                ins(out, idx, V, -1, False),
                [
                    Op(
                        "aten::zeros",
                        ins([V, C], 15, None, None, None),
                        [
                            empty("aten::empty", w),
                            Op(
                                "aten::zero_",
                                ins(w),
                                [
                                    Launch(
                                        "Memset (Device)",
                                        2000 + w.nbytes / 3000.0,
                                        cat="gpu_memset",
                                        api="cudaMemsetAsync",
                                        nbytes=w.nbytes,
                                    )
                                ],
                                cost=2500,
                            ),
                        ],
                        cost=2000,
                    ),
                    empty("aten::empty", sort_idx),
                    Launch(
                        K["emb_sort"], ew_ns(4 * sort_idx.nbytes) + 6000, grid=(idx.numel // 3840 + 1, 1, 1)
                    ),
                    Launch(K["emb_grad"], ew_ns(out.nbytes * 2), grid=(idx.numel // 32 + 1, 1, 1), regs=40),
                    Launch(K["emb_scatter"], ew_ns(out.nbytes), grid=(idx.numel // 32 + 1, 1, 1), regs=32),
                ],
                cost=9000,
            )
        ],
        cost=2000,
    )
    return Op(
        "aten::embedding",
        ins(w, idx, -1, False, False),
        [
            Op("aten::reshape", ins(idx, [-1]), [Op("aten::view", ins(idx, [-1]), cost=400)], cost=900),
            Op(
                "aten::index_select",
                ins(w, 0, flat),
                [Alloc(out.nbytes), ew(K["emb_fwd"], 2 * out.nbytes, out.numel)],
                cost=4000,
            ),
            Op("aten::view", ins(Tn(idx.numel, C), [*idx.shape, C]), cost=400),
        ],
        seq=TAKE,
        cost=2500,
        grad=Grad("EmbeddingBackward0", ins(out), [bwd], params=[w]),
    ), out


def gelu(h: Tn) -> Op:
    """``F.gelu(h)`` and its backward."""
    return Op(
        "aten::gelu",
        ins(h, "none"),
        [Alloc(h.nbytes), ew(K["gelu_fwd"], 2 * h.nbytes, h.numel)],
        seq=TAKE,
        cost=3000,
        grad=Grad(
            "GeluBackward0",
            ins(h),
            [
                Op(
                    "aten::gelu_backward",
                    ins(h, h, "none"),
                    [Alloc(h.nbytes), ew(K["gelu_bwd"], 3 * h.nbytes, h.numel)],
                    cost=3000,
                )
            ],
        ),
    )

"""The model: a nanoGPT-style GPT training step described as a program of ops
(:mod:`traceprof.testing.program` nodes), with the shapes, autograd nodes and kernels that
PyTorch's aten ops have for it.

Each builder returns the op subtree that ``torch.profiler`` records for one aten call (the
composite op and the ops it dispatches to, the allocations, the kernels it launches) and the
autograd node it creates, so that the forward and backward passes come from the same description.
"""

from __future__ import annotations

from collections.abc import Sequence

from traceprof.testing.kernels import FLASH_FLOPS_PER_NS, GEMM_FLOPS_PER_NS, K, ew_ns
from traceprof.testing.program import (
    FLOAT,
    LONG,
    PEEK,
    PREFIX,
    TAKE,
    TL,
    Alloc,
    Arg,
    Grad,
    Launch,
    Node,
    Op,
    Scope,
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
        "aten::t",
        ins(w),
        [
            Op(
                "aten::transpose",
                ins(w, 0, 1),
                [Op("aten::as_strided", ins(w, [c, r], [1, c], None), cost=300)],
                cost=700,
            )
        ],
        seq=seq,
        grad=grad,
        cost=900,
    ), tw


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
        mm = Op(
            "aten::addmm",
            ins(bias, x2, wt, 1, 1),
            [Alloc(y2.nbytes), gemm(K["gemm_tn"], m, fout, fin)],
            seq=TAKE,
            cost=6000,
            grad=Grad(
                "AddmmBackward0",
                ins(y2),
                [
                    t_op(wt)[0],
                    Op(
                        "aten::mm",
                        ins(y2, w),
                        [Alloc(x2.nbytes), gemm(K["gemm_nn"], m, fin, fout)],
                        cost=5000,
                    ),
                    t_op(Tn(fout, m))[0],
                    Op(
                        "aten::mm",
                        ins(Tn(fout, m, strides=[1, fout]), x2),
                        [Alloc(w.nbytes), gemm(K["gemm_nt"], fout, fin, m)],
                        cost=5000,
                    ),
                    t_op(Tn(fout, fin))[0],
                    Op(
                        "aten::sum",
                        ins(y2, [0], True, None),
                        [Alloc(bias.nbytes), ew(K["sum"], y2.nbytes, y2.numel)],
                        cost=4000,
                    ),
                    Op("aten::view", ins(Tn(1, fout), [fout]), cost=500),
                ],
                params=[bias],
            ),
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
        grad=Grad(
            "MmBackward0",
            ins(y2),
            [
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
            ],
        ),
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


def attention_core(x: Tn, n_head: int) -> tuple[list[Node], Tn]:
    """The ops of CausalSelfAttention.forward between c_attn and c_proj."""
    B, T, C3 = x.shape
    C = C3 // 3
    D = C // n_head
    part = Tn(B, T, C, strides=[T * C3, C3, 1])
    ops: list[Node] = [
        Op(
            "aten::split",
            ins(x, C, 2),
            [
                Op(
                    "aten::narrow",
                    ins(x, 2, i * C, C),
                    [
                        Op(
                            "aten::slice",
                            ins(x, 2, i * C, (i + 1) * C, 1),
                            [Op("aten::as_strided", ins(x, [B, T, C], [T * C3, C3, 1], i * C), cost=300)],
                            cost=800,
                        )
                    ],
                    cost=1100,
                )
                for i in range(3)
            ],
            seq=TAKE,
            cost=2500,
            grad=Grad(
                "SplitBackward0",
                ins(Tn(B, T, C), Tn(B, T, C), Tn(B, T, C)),
                [
                    Op(
                        "aten::cat",
                        ins(None, 2),
                        [Alloc(x.nbytes), ew(K["cat"], 2 * x.nbytes, x.numel)],
                        cost=5000,
                    )
                ],
            ),
        )
    ]
    head = Tn(B, T, n_head, D, strides=[T * C3, C3, D, 1])
    headT = Tn(B, n_head, T, D, strides=[T * C3, D, C3, 1])
    for _ in range(3):
        v, _v = view_op(part, [B, T, n_head, D])
        ops.append(v)
        ops.append(
            Op(
                "aten::transpose",
                ins(head, 1, 2),
                [Op("aten::as_strided", ins(head, [B, n_head, T, D], [T * C3, D, C3, 1], None), cost=300)],
                seq=TAKE,
                cost=900,
                grad=Grad(
                    "TransposeBackward0",
                    ins(headT),
                    [
                        Op(
                            "aten::transpose",
                            ins(headT, 1, 2),
                            [
                                Op(
                                    "aten::as_strided",
                                    ins(headT, [B, T, n_head, D], [T * C3, C3, D, 1], None),
                                    cost=300,
                                )
                            ],
                            cost=900,
                        )
                    ],
                ),
            )
        )
    flops = 4 * B * n_head * T * T * D / 2  # causal
    out = Tn(B, n_head, T, D)
    lse = Tn(B, n_head, T, dtype=FLOAT)
    fa_grid = (T // 128, B * n_head, 1)
    flash = Op(
        "aten::_scaled_dot_product_flash_attention",
        ins(headT, headT, headT, 0.0, True, False, None),
        [
            *[
                Op(
                    "aten::transpose",
                    ins(headT, 1, 2),
                    [
                        Op(
                            "aten::as_strided",
                            ins(headT, [B, T, n_head, D], [T * C3, C3, D, 1], None),
                            cost=300,
                        )
                    ],
                    cost=800,
                )
                for _ in range(3)
            ],
            Op(
                "aten::_flash_attention_forward",
                ins(head, head, head, None, None, T, T, 0.0, True, False, None, None, None, None),
                [
                    empty("aten::empty_like", head, head, None, None, None, None, None),
                    empty("aten::empty", lse),
                    Launch(
                        K["flash_fwd"],
                        6000 + flops / FLASH_FLOPS_PER_NS,
                        grid=fa_grid,
                        block=(128, 1, 1),
                        regs=255,
                        smem=49152,
                    ),
                ],
                cost=9000,
            ),
            Op(
                "aten::transpose",
                ins(Tn(B, T, n_head, D), 1, 2),
                [
                    Op(
                        "aten::as_strided",
                        ins(Tn(B, T, n_head, D), [B, n_head, T, D], [T * C, D, C, 1], None),
                        cost=300,
                    )
                ],
                cost=800,
            ),
        ],
        seq=TAKE,
        cost=5000,
        grad=Grad(
            "ScaledDotProductFlashAttentionBackward0",
            ins(out),
            [
                Op(
                    "aten::_scaled_dot_product_flash_attention_backward",
                    ins(out, headT, headT, headT, out, lse, None, None, T, T, 0.0, True, None, None, None),
                    [
                        Op(
                            "aten::_flash_attention_backward",
                            ins(
                                head,
                                head,
                                head,
                                head,
                                head,
                                lse,
                                None,
                                None,
                                T,
                                T,
                                0.0,
                                True,
                                None,
                                None,
                                None,
                            ),
                            [
                                empty("aten::empty_like", head, head, None, None, None, None, None),
                                empty("aten::empty_like", head, head, None, None, None, None, None),
                                empty("aten::empty_like", head, head, None, None, None, None, None),
                                empty("aten::empty", lse),
                                Op(
                                    "aten::empty",
                                    ins([B, T, n_head, D], 6, 0, None, None, 0),
                                    [Alloc(B * T * C * 4)],
                                    cost=1500,
                                ),
                                Launch(
                                    "Memset (Device)",
                                    2000 + B * T * C * 4 / 3000.0,
                                    cat="gpu_memset",
                                    api="cudaMemsetAsync",
                                    nbytes=B * T * C * 4,
                                ),
                                Launch(K["flash_bwd_dot"], ew_ns(2 * out.nbytes), grid=(T // 128, B, n_head)),
                                Launch(
                                    K["flash_bwd"],
                                    9000 + 2.5 * flops / FLASH_FLOPS_PER_NS,
                                    grid=(T // 128, B, n_head),
                                    block=(256, 1, 1),
                                    regs=255,
                                    smem=114688,
                                ),
                                Launch(K["flash_bwd_cvt"], ew_ns(3 * out.nbytes), grid=(T // 128, B, n_head)),
                            ],
                            cost=15000,
                        )
                    ],
                    cost=4000,
                )
            ],
        ),
    )
    ops.append(
        Op(
            "aten::scaled_dot_product_attention",
            ins(headT, headT, headT, None, 0.0, True, None, False),
            [flash],
            seq=PEEK,
            cost=3000,
        )
    )
    ops.append(
        Op(
            "aten::transpose",
            ins(out, 1, 2),
            [Op("aten::as_strided", ins(out, [B, T, n_head, D], [T * C, D, C, 1], None), cost=300)],
            seq=TAKE,
            cost=900,
            grad=Grad(
                "TransposeBackward0",
                ins(Tn(B, T, n_head, D)),
                [Op("aten::transpose", ins(Tn(B, T, n_head, D), 1, 2), cost=900)],
            ),
        )
    )
    y4 = Tn(B, T, n_head, D, strides=[T * C, D, C, 1])
    ops.append(
        Op(
            "aten::contiguous",
            ins(y4, 0),
            [
                Op(
                    "aten::clone",
                    ins(y4, 0),
                    [
                        empty("aten::empty_like", y4, y4, None, None, None, None, 0),
                        Op(
                            "aten::copy_",
                            ins(Tn(B, T, n_head, D), y4, False),
                            [ew(K["copy"], 2 * y4.nbytes, y4.numel)],
                            cost=4000,
                        ),
                    ],
                    seq=TAKE,
                    cost=2500,
                    grad=Grad("CloneBackward0", ins(Tn(B, T, n_head, D))),
                )
            ],
            seq=PEEK,
            cost=1200,
        )
    )
    v, y = view_op(Tn(B, T, n_head, D), [B, T, C])
    ops.append(v)
    return ops, y


class Model:
    """A nanoGPT-style GPT: the forward program, parameter list and module list."""

    def __init__(
        self, n_layer: int, n_embd: int, n_head: int, batch: int, seq_len: int, vocab: int = 50304
    ) -> None:
        B, T, C, V = batch, seq_len, n_embd, vocab
        self.cfg = {"n_layer": n_layer, "n_embd": C, "n_head": n_head, "batch": B, "seq_len": T, "vocab": V}
        self.modules: list[tuple[str, str]] = []  # (qualified name, class), in call order
        self.params: list[Tn] = []  # Tn of every parameter (lm_head tied to wte)
        x = Tn(B, T, C)
        idx = Tn(B, T, dtype=LONG)

        def scope(cls: str, qual: str, children: Sequence[Node]) -> Scope:
            self.modules.append((qual, cls))
            return Scope(f"{PREFIX}{cls}: {qual}", children, qual)

        def lin(qual: str, x: Tn, fin: int, fout: int, bias: bool = True) -> tuple[Scope, Tn]:
            w = Tn(fout, fin)
            b = Tn(fout) if bias else None
            self.params += [w] + ([b] if b is not None else [])
            op, y = linear(x, w, b)
            return scope("Linear", qual, [op]), y

        def ln(qual: str, x: Tn) -> Scope:
            self.params += [Tn(C), Tn(C)]
            return scope("LayerNorm", qual, [layer_norm(x)])

        root: list[Node] = []
        wte, wpe = Tn(V, C), Tn(T, C)
        self.params += [wte, wpe]
        pos = Tn(T, dtype=LONG)
        root.append(
            Op(
                "aten::arange",
                ins(0, T, None, None, None, None),
                [
                    empty("aten::empty", pos, [0], 4, None, None, None, None),
                    Op("aten::arange", ins(0, T, 1, pos), [Launch(K["arange"], 2500)], cost=2500),
                ],
                cost=3000,
            )
        )
        self.modules.append(("", "GPT"))
        e1, _ = embedding(wte, idx)
        e2, _ = embedding(wpe, pos)
        root.append(scope("Embedding", "transformer.wte", [e1]))
        root.append(scope("Embedding", "transformer.wpe", [e2]))
        root.append(add(x))
        root.append(scope("Dropout", "transformer.drop", [dropout(x)]))
        for i in range(n_layer):
            p = f"transformer.h.{i}"
            blk: list[Node] = [ln(f"{p}.ln_1", x)]
            c_attn, qkv = lin(f"{p}.attn.c_attn", x, C, 3 * C)
            core, y = attention_core(qkv, n_head)
            c_proj, _ = lin(f"{p}.attn.c_proj", y, C, C)
            blk.append(
                scope(
                    "CausalSelfAttention",
                    f"{p}.attn",
                    [c_attn, *core, c_proj, scope("Dropout", f"{p}.attn.resid_dropout", [dropout(x)])],
                )
            )
            blk.append(add(x))
            blk.append(ln(f"{p}.ln_2", x))
            c_fc, h = lin(f"{p}.mlp.c_fc", x, C, 4 * C)
            gelu = Op(
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
            c_proj2, _ = lin(f"{p}.mlp.c_proj", h, 4 * C, C)
            blk.append(
                scope(
                    "MLP",
                    f"{p}.mlp",
                    [
                        c_fc,
                        scope("GELU", f"{p}.mlp.gelu", [gelu]),
                        c_proj2,
                        scope("Dropout", f"{p}.mlp.dropout", [dropout(x)]),
                    ],
                )
            )
            blk.append(add(x))
            root.append(scope("Block", p, blk))
        root.append(ln("transformer.ln_f", x))
        # lm_head shares wte's weight: its TBackward0 accumulates nothing of its own
        w_tied = Tn(V, C)
        lm, logits = linear(x, w_tied, None)
        t_node = lm.children[0]
        assert isinstance(t_node, Op) and t_node.grad is not None  # aten::t and its TBackward0
        t_node.grad.params = ()
        self.modules.append(("lm_head", "Linear"))
        root.append(Scope(f"{PREFIX}Linear: lm_head", [lm], "lm_head"))
        # loss = F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-1)
        M = B * T
        lg = Tn(M, V)
        v1, _ = view_op(logits, [M, V])
        root.append(v1)
        root.append(Op("aten::view", ins(idx, [-1]), cost=600))
        tgt = Tn(M, dtype=LONG)
        scalar = Tn()
        lsm = Op(
            "aten::_log_softmax",
            ins(lg, 1, False),
            [
                Alloc(lg.nbytes),
                Launch(K["lsm_fwd"], ew_ns(2 * lg.nbytes), grid=(M, 1, 1), block=(1024, 1, 1), regs=40),
            ],
            seq=TAKE,
            cost=3500,
            grad=Grad(
                "LogSoftmaxBackward0",
                ins(lg),
                [
                    Op(
                        "aten::_log_softmax_backward_data",
                        ins(lg, lg, 1, 15),
                        [
                            Alloc(lg.nbytes),
                            Launch(
                                K["lsm_bwd"],
                                ew_ns(3 * lg.nbytes),
                                grid=(M, 1, 1),
                                block=(1024, 1, 1),
                                regs=40,
                            ),
                        ],
                        cost=3500,
                    )
                ],
            ),
        )
        nll = Op(
            "aten::nll_loss_forward",
            ins(lg, tgt, None, 1, -1),
            [Alloc(512), Alloc(512), Launch(K["nll_fwd"], 9000, grid=(1, 1, 1), block=(1024, 1, 1))],
            seq=TAKE,
            cost=4000,
            grad=Grad(
                "NllLossBackward0",
                ins(scalar),
                [
                    Op(
                        "aten::nll_loss_backward",
                        ins(scalar, lg, tgt, None, 1, -1, scalar),
                        [
                            Alloc(lg.nbytes),
                            Op(
                                "aten::zero_",
                                ins(lg),
                                [
                                    Op(
                                        "aten::fill_",
                                        ins(lg, 0),
                                        [ew(K["fill"], lg.nbytes, lg.numel)],
                                        cost=2500,
                                    )
                                ],
                                cost=2000,
                            ),
                            Launch(K["nll_bwd"], 9000, grid=(1, 1, 1), block=(1024, 1, 1)),
                        ],
                        cost=5000,
                    )
                ],
            ),
        )
        root.append(
            Op(
                "aten::cross_entropy_loss",
                ins(lg, tgt, None, 1, -1, 0.0),
                [
                    Op("aten::log_softmax", ins(lg, 1, None), [lsm], seq=PEEK, cost=1500),
                    Op(
                        "aten::nll_loss_nd",
                        ins(lg, tgt, None, 1, -1),
                        [Op("aten::nll_loss", ins(lg, tgt, None, 1, -1), [nll], seq=PEEK, cost=1200)],
                        seq=PEEK,
                        cost=1200,
                    ),
                ],
                seq=PEEK,
                cost=2000,
            )
        )
        self.forward = Scope(f"{PREFIX}GPT: ", root, "")
        self.modules.insert(0, self.modules.pop(self.modules.index(("", "GPT"))))
        self.scopes_per_step = self._count_scopes(self.forward)
        self.batch_inputs = [idx, idx]
        self.optimizer = self._adamw()

    @staticmethod
    def _count_scopes(node: Node) -> int:
        n = 1 if isinstance(node, Scope) and node.qual is not None else 0
        for c in node.children if isinstance(node, (Op, Scope)) else ():
            n += Model._count_scopes(c)
        return n

    def _adamw(self) -> Scope:
        """Optimizer.step of torch.optim.AdamW(foreach=True) on the parameters."""
        n = len(self.params)
        numel = sum(p.numel for p in self.params)
        chunks = sum(-(-p.numel // 65536) for p in self.params)

        def foreach(
            name: str, kname: str, lists: int, concrete: list[float | None], tensors_per_elem: int
        ) -> Op:
            launches = max(-(-n // (110 // lists)), -(-chunks // 320))
            per = numel * 2 * tensors_per_elem / launches
            ks = [
                Launch(K[kname], ew_ns(per) + 2000, grid=(320, 1, 1), block=(512, 1, 1), regs=38)
                for _ in range(launches)
            ]
            return Op(name, ins(*([TL] * lists), *concrete), ks, cost=12000 + 40 * n)

        ops = [
            Op("aten::_foreach_add_", ins(TL, 1), cost=25000 + 30 * n),  # CPU step counters
            foreach("aten::_foreach_mul_", "mta_mul", 1, [0.9999], 2),  # weight decay
            foreach("aten::_foreach_lerp_", "mta_lerp", 2, [0.1], 3),
            foreach("aten::_foreach_mul_", "mta_mul", 1, [0.95], 2),
            foreach("aten::_foreach_addcmul_", "mta_addcmul", 3, [0.05], 4),
            foreach("aten::_foreach_sqrt", "mta_sqrt", 1, [], 2),
            foreach("aten::_foreach_div_", "mta_div", 1, [None], 2),
            foreach("aten::_foreach_add_", "mta_add", 1, [1e-08], 2),
            foreach("aten::_foreach_addcdiv_", "mta_addcdiv", 3, [None], 4),
        ]
        return Scope("Optimizer.step#AdamW.step", ops)

"""The model: a nanoGPT-style GPT training step described as a program of ops
(:mod:`traceprof.testing.program` nodes), with the shapes, autograd nodes and kernels that
PyTorch's aten ops have for it.

The ops are built by :mod:`traceprof.testing.aten`, one builder per aten call; here they make
the attention core (split, flash attention, merge) and the model's modules, so that the forward and
backward passes come from the same description.
"""

from __future__ import annotations

from collections.abc import Sequence

from traceprof.testing.aten import (
    add,
    dropout,
    embedding,
    empty,
    ew,
    gelu,
    layer_norm,
    linear,
    transpose_op,
    view_op,
)
from traceprof.testing.kernels import FLASH_FLOPS_PER_NS, K, ew_ns
from traceprof.testing.program import (
    FLOAT,
    LONG,
    PEEK,
    PREFIX,
    TAKE,
    TL,
    Alloc,
    Grad,
    Launch,
    Node,
    Op,
    Scope,
    Tn,
    ins,
)


def attention_core(x: Tn, n_head: int) -> tuple[list[Node], Tn]:
    """The ops of CausalSelfAttention.forward between c_attn and c_proj."""
    B, T, C3 = x.shape
    C = C3 // 3
    D = C // n_head
    part = Tn(B, T, C, strides=[T * C3, C3, 1])
    ops: list[Node] = [_split_qkv(x)]
    head = Tn(B, T, n_head, D, strides=[T * C3, C3, D, 1])
    headT = Tn(B, n_head, T, D, strides=[T * C3, D, C3, 1])
    for _ in range(3):
        v, _v = view_op(part, [B, T, n_head, D])
        ops.append(v)
        ops.append(_to_heads(head, headT))
    out = Tn(B, n_head, T, D)
    ops.append(
        Op(
            "aten::scaled_dot_product_attention",
            ins(headT, headT, headT, None, 0.0, True, None, False),
            [_flash(head, headT, out)],
            seq=PEEK,
            cost=3000,
        )
    )
    ops.extend(_merge_heads(out))
    v, y = view_op(Tn(B, T, n_head, D), [B, T, C])
    ops.append(v)
    return ops, y


def _split_qkv(x: Tn) -> Op:
    """``qkv.split(C, dim=2)``: three views of c_attn's output."""
    B, T, C3 = x.shape
    C = C3 // 3
    return Op(
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


def _to_heads(head: Tn, headT: Tn) -> Op:
    """``.transpose(1, 2)`` of one of q, k, v viewed as heads."""
    B, n_head, T, D = headT.shape
    C3 = head.strides[1]
    back = transpose_op(headT, (1, 2), [B, T, n_head, D], [T * C3, C3, D, 1], 900)
    grad = Grad("TransposeBackward0", ins(headT), [back])
    return transpose_op(head, (1, 2), [B, n_head, T, D], [T * C3, D, C3, 1], 900, seq=TAKE, grad=grad)


def _flash(head: Tn, headT: Tn, out: Tn) -> Op:
    """The flash attention of q, k, v (``is_causal=True``) and its backward."""
    B, n_head, T, D = headT.shape
    C3, C = head.strides[1], n_head * D
    flops = 4 * B * n_head * T * T * D / 2  # causal
    lse = Tn(B, n_head, T, dtype=FLOAT)
    fa_grid = (T // 128, B * n_head, 1)
    return Op(
        "aten::_scaled_dot_product_flash_attention",
        ins(headT, headT, headT, 0.0, True, False, None),
        [
            *[transpose_op(headT, (1, 2), [B, T, n_head, D], [T * C3, C3, D, 1], 800) for _ in range(3)],
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
            transpose_op(Tn(B, T, n_head, D), (1, 2), [B, n_head, T, D], [T * C, D, C, 1], 800),
        ],
        seq=TAKE,
        cost=5000,
        grad=_flash_backward(head, headT, out, lse, flops),
    )


def _flash_backward(head: Tn, headT: Tn, out: Tn, lse: Tn, flops: float) -> Grad:
    """The autograd node of the flash attention: its backward kernels."""
    B, n_head, T, D = headT.shape
    C = n_head * D
    return Grad(
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
    )


def _merge_heads(out: Tn) -> list[Node]:
    """``y.transpose(1, 2).contiguous()``: the heads back side by side."""
    B, n_head, T, D = out.shape
    C = n_head * D
    ops: list[Node] = []
    ops.append(
        transpose_op(
            out,
            (1, 2),
            [B, T, n_head, D],
            [T * C, D, C, 1],
            900,
            seq=TAKE,
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
    return ops


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
        root.append(self._scope("Embedding", "transformer.wte", [e1]))
        root.append(self._scope("Embedding", "transformer.wpe", [e2]))
        root.append(add(x))
        root.append(self._scope("Dropout", "transformer.drop", [dropout(x)]))
        for i in range(n_layer):
            root.append(self._block(f"transformer.h.{i}", x, n_head))
        root.append(self._layer_norm("transformer.ln_f", x))
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
        root.append(cross_entropy(lg, tgt, scalar))
        self.forward = Scope(f"{PREFIX}GPT: ", root, "")
        self.modules.insert(0, self.modules.pop(self.modules.index(("", "GPT"))))
        self.scopes_per_step = self._count_scopes(self.forward)
        self.batch_inputs = [idx, idx]
        self.optimizer = self._adamw()

    def _scope(self, cls: str, qual: str, children: Sequence[Node]) -> Scope:
        """The scope of one module call (its name and class kept in call order)."""
        self.modules.append((qual, cls))
        return Scope(f"{PREFIX}{cls}: {qual}", children, qual)

    def _linear(self, qual: str, x: Tn, fin: int, fout: int, bias: bool = True) -> tuple[Scope, Tn]:
        """An nn.Linear call and its output; its weight and bias among the parameters."""
        w = Tn(fout, fin)
        b = Tn(fout) if bias else None
        self.params += [w] + ([b] if b is not None else [])
        op, y = linear(x, w, b)
        return self._scope("Linear", qual, [op]), y

    def _layer_norm(self, qual: str, x: Tn) -> Scope:
        """An nn.LayerNorm call; its weight and bias among the parameters."""
        C = x.shape[-1]
        self.params += [Tn(C), Tn(C)]
        return self._scope("LayerNorm", qual, [layer_norm(x)])

    def _block(self, p: str, x: Tn, n_head: int) -> Scope:
        """One transformer block (``transformer.h.N``): attention and MLP, each after its
        LayerNorm and added to the residual."""
        C = x.shape[-1]
        blk: list[Node] = [self._layer_norm(f"{p}.ln_1", x)]
        c_attn, qkv = self._linear(f"{p}.attn.c_attn", x, C, 3 * C)
        core, y = attention_core(qkv, n_head)
        c_proj, _ = self._linear(f"{p}.attn.c_proj", y, C, C)
        blk.append(
            self._scope(
                "CausalSelfAttention",
                f"{p}.attn",
                [c_attn, *core, c_proj, self._scope("Dropout", f"{p}.attn.resid_dropout", [dropout(x)])],
            )
        )
        blk.append(add(x))
        blk.append(self._layer_norm(f"{p}.ln_2", x))
        c_fc, h = self._linear(f"{p}.mlp.c_fc", x, C, 4 * C)
        act = gelu(h)
        c_proj2, _ = self._linear(f"{p}.mlp.c_proj", h, 4 * C, C)
        blk.append(
            self._scope(
                "MLP",
                f"{p}.mlp",
                [
                    c_fc,
                    self._scope("GELU", f"{p}.mlp.gelu", [act]),
                    c_proj2,
                    self._scope("Dropout", f"{p}.mlp.dropout", [dropout(x)]),
                ],
            )
        )
        blk.append(add(x))
        return self._scope("Block", p, blk)

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


def cross_entropy(lg: Tn, tgt: Tn, scalar: Tn) -> Op:
    """``F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-1)``: log_softmax
    and nll_loss, with their backward."""
    lsm = _log_softmax(lg)
    nll = _nll_loss(lg, tgt, scalar)
    return Op(
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


def _log_softmax(lg: Tn) -> Op:
    """``aten::_log_softmax`` of the logits and its backward."""
    M = lg.shape[0]
    return Op(
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


def _nll_loss(lg: Tn, tgt: Tn, scalar: Tn) -> Op:
    """``aten::nll_loss_forward`` of the log-probabilities and its backward."""
    return Op(
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

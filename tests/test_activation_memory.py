"""Activations per module from a trace, against the live model: what the forward leaves for the
backward.

Each model trains one step under ``traceprof.capture.profile(..., profile_memory=True)`` on CPU;
traceprof pairs the trace's allocations with their frees and counts, per module, the bytes its
own forward allocated that are still allocated when the backward pass begins
(``own_activation_bytes``). The reference runs the same forward live:

- a ``TorchDispatchMode`` sees every op's outputs and notes, for each storage an op creates
  (not one of its inputs' storages: a view or an in-place op creates none), the innermost
  module whose forward was running (a stack kept by forward pre-hooks and hooks);
- ``torch.autograd.graph.saved_tensors_hooks`` sees every tensor autograd saves for the
  backward; the storages of those, grouped by the module that created them, are the
  reference's activations. Parameters, buffers (BatchNorm's running statistics: state, not
  allocated by the forward) and the model's inputs are left out;
- activation checkpointing (``torch.utils.checkpoint``, non-reentrant) installs hooks of its
  own that save nothing, and keeps the checkpointed function's inputs and the CPU's random
  number generator state (``preserve_rng_state``, to replay dropout): those are added, the
  state to the checkpointing module.

The output of the model is not held by the loop (``loss_fn(model(x)).backward()``), so the
forward leaves only what autograd saved, which the two sides must agree on within 5% per
module and for the whole model.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

import traceprof  # noqa: E402
from traceprof.capture import profile  # noqa: E402
from traceprof.result.model import NodeKind  # noqa: E402

TOLERANCE = 0.05


# --- models ----------------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(128, 512)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(512, 512)
        self.act2 = nn.GELU()
        self.drop = nn.Dropout(0.1)
        self.fc3 = nn.Linear(512, 10)

    def forward(self, x):
        return self.fc3(self.drop(self.act2(self.fc2(self.act1(self.fc1(x))))))


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    """A pre-norm transformer block, attention by scaled_dot_product_attention."""

    def __init__(self, dim: int = 128, heads: int = 4) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class Checkpointed(nn.Module):
    """``inner`` run under non-reentrant activation checkpointing: its forward keeps only its
    input, and runs again in the backward."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.kept_inputs: list = []  # the reference's record of what checkpoint keeps

    def forward(self, x):
        self.kept_inputs.append(x)
        return checkpoint(self.inner, x, use_reentrant=False)


def _mlp_block() -> nn.Module:
    return nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.Tanh())


class CheckpointedStack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Linear(64, 256), nn.ReLU())
        self.blocks = nn.ModuleList(
            [_mlp_block(), Checkpointed(_mlp_block()), Checkpointed(_mlp_block()), _mlp_block()]
        )
        self.head = nn.Linear(256, 10)

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _sum(out):
    return out.float().sum()


CASES = {
    "mlp": (MLP, lambda: (torch.randn(64, 128),), _sum),
    "transformer_block_sdpa": (Block, lambda: (torch.randn(4, 64, 128),), _sum),
    "cnn_batchnorm": (CNN, lambda: (torch.randn(8, 3, 32, 32),), _sum),
    "activation_checkpointing": (CheckpointedStack, lambda: (torch.randn(32, 64),), _sum),
}


# --- the reference ---------------------------------------------------------------------------


def reference_activations(model: nn.Module, inputs: tuple, loss_fn) -> dict[str, float]:
    """Qualified module name -> bytes of the storages its forward created that autograd saved
    for the backward (or activation checkpointing kept), parameters, buffers and inputs left
    out."""
    names = {m: n for n, m in model.named_modules()}
    stack = ["(outside)"]

    def enter(mod, args) -> None:
        stack.append(names[mod])

    def leave(mod, args, out) -> None:
        stack.pop()

    hooks = []
    for m in names:
        hooks.append(m.register_forward_pre_hook(enter))
        hooks.append(m.register_forward_hook(leave, always_call=True))

    def ptr(t) -> int:
        return t.untyped_storage().data_ptr()

    creator: dict[int, tuple[str, int]] = {}

    class Creations(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            given = {ptr(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and ptr(t) not in given:
                    creator[ptr(t)] = (stack[-1], t.untyped_storage().nbytes())
            return out

    saved: dict[int, tuple[str, int]] = {}
    states: list[tuple[str, int]] = []  # the RNG states checkpointing keeps

    def pack(t):
        if isinstance(t, torch.Tensor) and ptr(t) in creator:
            saved[ptr(t)] = creator[ptr(t)]
        return t

    excluded = {ptr(t) for t in list(model.parameters()) + list(model.buffers())}
    excluded |= {ptr(t) for t in inputs if isinstance(t, torch.Tensor)}
    checkpointed = [m for m in model.modules() if isinstance(m, Checkpointed)]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), Creations():
            loss = loss_fn(model(*inputs))
        rng_state = torch.get_rng_state().untyped_storage().nbytes()
        for m in checkpointed:  # checkpoint keeps its function's inputs and the RNG state
            for x in m.kept_inputs:
                if ptr(x) in creator:
                    saved[ptr(x)] = creator[ptr(x)]
                states.append((names[m], rng_state))
    finally:
        for h in hooks:
            h.remove()
        for m in checkpointed:
            m.kept_inputs.clear()
    del loss
    out: dict[str, float] = defaultdict(float)
    for p, (module, nbytes) in saved.items():
        if p not in excluded and module != "(outside)":
            out[module] += nbytes
    for module, nbytes in states:
        out[module] += nbytes
    return dict(out)


def traced_profile(model: nn.Module, inputs: tuple, loss_fn, logdir) -> traceprof.ModuleProfile:
    """One training step of ``model`` traced with memory (after one warmup step), analyzed."""
    with profile(model, logdir=str(logdir), wait=0, warmup=1, active=1, profile_memory=True) as prof:
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            loss_fn(model(*inputs)).backward()
            prof.step()
    for m in model.modules():
        if isinstance(m, Checkpointed):
            m.kept_inputs.clear()
    result = prof.analyze()
    result.self_check()
    return result


@pytest.mark.parametrize("case", list(CASES))
def test_activation_bytes_per_module_match_the_saved_tensors(case, tmp_path):
    make, make_inputs, loss_fn = CASES[case]
    torch.manual_seed(0)
    model = make().train()
    inputs = make_inputs()
    expected = reference_activations(model, inputs, loss_fn)
    assert sum(expected.values()) > 0
    result = traced_profile(model, inputs, loss_fn, tmp_path)
    got = {}
    for node in result.walk():
        if node.kind is not NodeKind.MODULE:
            continue
        use = result.memory_of(node)
        got[node.qualified_name] = use.own_activation_bytes if use is not None else 0.0
        assert use is None or use.own_activation_bytes is not None, node.qualified_name
    for name in sorted(set(expected) | {n for n, v in got.items() if v}):
        want, have = expected.get(name, 0.0), got.get(name, 0.0)
        assert have == pytest.approx(want, rel=TOLERANCE), (case, name, have, want)
    root = result.nodes[result.roots[0]]
    total = result.memory_of(root).activation_bytes
    assert total == pytest.approx(sum(expected.values()), rel=TOLERANCE)
    # the whole forward's: the modules' and the loss's (outside the modules) together
    summary = result.memory_summary
    assert summary is not None and summary.activation_bytes >= total
    assert summary.forward_end is not None
    assert summary.forward_end.activations_bytes == pytest.approx(summary.activation_bytes, rel=TOLERANCE)


def test_checkpointed_blocks_keep_their_output_only_and_allocate_again_in_the_backward(tmp_path):
    make, make_inputs, loss_fn = CASES["activation_checkpointing"]
    torch.manual_seed(0)
    model = make().train()
    result = traced_profile(model, make_inputs(), loss_fn, tmp_path)

    def use(name):
        return result.memory_of(result.find(name))

    # a plain block keeps its ReLU's and its Tanh's outputs for the backward
    assert use("blocks.0.1").own_activation_bytes > 0 and use("blocks.0.3").own_activation_bytes > 0
    # a checkpointed block keeps nothing made inside it but its output (the next block's input)
    for inner in ("blocks.1.inner.0", "blocks.1.inner.1", "blocks.1.inner.2"):
        assert use(inner).own_activation_bytes == 0, inner
    assert use("blocks.1.inner.3").own_activation_bytes == use("blocks.0.3").own_activation_bytes
    assert use("blocks.1").activation_bytes < use("blocks.0").activation_bytes
    # its forward runs again in the backward pass and allocates there
    assert use("blocks.1").backward.allocated_bytes >= use("blocks.0").activation_bytes
    summary = result.memory_summary
    assert summary.recomputed_modules == ("blocks.1.inner", "blocks.2.inner")
    assert summary.recomputed_bytes >= 2 * use("blocks.0").activation_bytes


class Stack(nn.Module):
    """Four MLP blocks; those in ``checkpointed`` run under activation checkpointing, called
    from the stack's forward (so the module names are the same either way)."""

    def __init__(self, checkpointed: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([_mlp_block() for _ in range(4)])
        self.checkpointed = checkpointed

    def forward(self, x):
        for i, block in enumerate(self.blocks):
            x = checkpoint(block, x, use_reentrant=False) if i in self.checkpointed else block(x)
        return x


def test_diff_compares_activations_per_module_and_the_peak_by_category(tmp_path):
    """The same model without and with activation checkpointing of two blocks: the diff gives
    each module's activations on both sides (the checkpointed blocks keep only their output)
    and the step's peak by category, in the text, the rows and the JSON document."""
    import json

    from traceprof.compare.records import diff_document, diff_rows
    from traceprof.render.diff import DIFF_REGISTRY
    from traceprof.render.registry import RenderOptions

    paths = []
    for name, blocks in (("base", ()), ("new", (1, 2))):
        torch.manual_seed(0)
        model = Stack(blocks).train()
        result = traced_profile(model, (torch.randn(32, 256),), _sum, tmp_path / name)
        paths.append(result.metadata.path)
    diff = traceprof.diff(*paths)
    rows = {(r["qualified_name"], r["pass"]): r for r in diff_rows(diff)}
    plain = rows[("blocks.0", "forward")]
    assert plain["base_activation_bytes"] == plain["new_activation_bytes"] > 0
    for name in ("blocks.1", "blocks.2"):
        row = rows[(name, "forward")]
        # its output only (the next block's input), not its ReLU's
        assert row["new_activation_bytes"] == row["base_activation_bytes"] / 2
        assert rows[(name, "backward")]["base_activation_bytes"] is None  # the forward's row holds it
    assert diff.new.activation_bytes < diff.base.activation_bytes
    assert dict(diff.base.peak_categories)["activations"] is not None
    doc = json.loads(json.dumps(diff_document(diff)))
    assert doc["base"]["activation_bytes"] == diff.base.activation_bytes
    assert set(doc["new"]["peak_categories"]) >= {"activations", "gradients", "temporaries"}
    text = DIFF_REGISTRY.renderer("tree").render(diff, RenderOptions())
    memory_line = next(line for line in text.splitlines() if line.startswith("memory:"))
    assert memory_line.startswith("memory:    activations ") and "(at the peak: activations " in memory_line
    assert "act " in text

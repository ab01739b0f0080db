"""Per-module FLOPs from traces against torch.utils.flop_counter.FlopCounterMode, forward and
backward, on CPU: the sample models, a depthwise/grouped CNN, attention with a causal mask and
recurrent layers.

Each model runs once under traceprof.capture (torch.profiler with record_shapes=True and
traceprof's module scopes); traceprof analyzes the exported trace with the formulas of the op
families FlopCounterMode counts (matrix products, convolutions, attention). The reference:

- forward: FlopCounterMode's per-module counts over one forward of the whole model;
- backward: FlopCounterMode around the backward of each module call run alone (its inputs
  detached, a gradient of ones on its outputs). FlopCounterMode's own module tracking
  attributes backward ops with gradient hooks on module inputs and outputs, which puts an op
  into several modules when one input feeds several modules (ResNet's downsample branch,
  BERT's query/key/value), when a module returns its input (``Dropout(p=0)``), or when an
  output also feeds another module (BERT's ``last_hidden_state`` and its pooler). The whole
  backward, which needs no tracking, must equal the root's isolated one.

Two additions to FlopCounterMode's registry, built from its own formulas: the CPU flash
attention kernels (which it has no entry for; counted with its ``sdpa_flop_count``, the masked
half of causal attention left out as traceprof counts it), and ``convolution_backward`` applied
per group (its weight-gradient formula ignores ``groups`` and overcounts grouped convolutions by
the number of groups).
"""

from __future__ import annotations

import math
from collections import defaultdict

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from torch.utils._pytree import tree_flatten, tree_map  # noqa: E402
from torch.utils.flop_counter import (  # noqa: E402
    FlopCounterMode,
    conv_backward_flop,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)

import traceprof  # noqa: E402
from traceprof.capture import profile_once, sample_models  # noqa: E402
from traceprof.flops import MATRIX_FAMILIES, REGISTRY  # noqa: E402
from traceprof.result.model import NodeKind  # noqa: E402

aten = torch.ops.aten
TOLERANCE = 0.01


# --- the reference ---------------------------------------------------------------------------


def _causal_fraction(s_q: int, s_k: int) -> float:
    return float(torch.ones(s_q, s_k).tril().sum()) / (s_q * s_k)


def _cpu_flash(q, k, v, dropout_p=0.0, is_causal=False, *args, out_shape=None, **kwargs):
    return sdpa_flop_count(q, k, v) * (_causal_fraction(q[2], k[2]) if is_causal else 1)


def _cpu_flash_backward(
    grad, q, k, v, out, lse, dropout_p=0.0, is_causal=False, *args, out_shape=None, **kwargs
):
    return sdpa_backward_flop_count(grad, q, k, v) * (_causal_fraction(q[2], k[2]) if is_causal else 1)


def _conv_backward_per_group(
    grad_out,
    x,
    w,
    bias_sizes,
    stride,
    padding,
    dilation,
    transposed,
    output_padding,
    groups,
    output_mask,
    out_shape=None,
    **kwargs,
):
    def per_group(shape, dim):
        if shape is None:
            return None
        shape = list(shape)
        shape[dim] //= groups
        return shape

    outs = [per_group(out_shape[0], 1), per_group(out_shape[1], 0), out_shape[2]]
    return groups * conv_backward_flop.__wrapped__(
        per_group(grad_out, 1),
        per_group(x, 1),
        per_group(w, 0),
        bias_sizes,
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        1,
        output_mask,
        outs,
    )


ADDITIONS = {
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_backward,
    aten.convolution_backward: _conv_backward_per_group,
}


def _float_sum(output):
    tensors = [t for t in tree_flatten(output)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return sum(t.sum() for t in tensors)


def _qualified(fcm_name: str, root: str) -> str:
    """FlopCounterMode names modules ``Root.a.b``; traceprof ``a.b`` ('' for the root)."""
    return "" if fcm_name == root else fcm_name[len(root) + 1 :]


def reference_flops(model, inputs) -> dict[str, list[float]]:
    """qualified name -> [forward FLOPs, backward FLOPs] by FlopCounterMode."""
    root = type(model).__name__
    result: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    names = {m: n for n, m in model.named_modules()}
    calls = []

    def record(module, args, kwargs):
        calls.append((names[module], module, args, kwargs))

    hooks = [m.register_forward_pre_hook(record, with_kwargs=True) for m in model.modules()]
    try:
        with FlopCounterMode(display=False, custom_mapping=ADDITIONS) as counter:
            output = model(*inputs)
            forward = {k: sum(v.values()) for k, v in counter.get_flop_counts().items()}
            _float_sum(output).backward()
            tracked_backward = {
                k: sum(v.values()) - forward.get(k, 0) for k, v in counter.get_flop_counts().items()
            }
    finally:
        for h in hooks:
            h.remove()
    for name, flops in forward.items():
        if name != "Global":
            result[_qualified(name, root)][0] = flops

    def fresh(t):
        if isinstance(t, torch.Tensor):
            leaf = t.detach().clone().requires_grad_(t.requires_grad)
            return leaf.clone() if t.requires_grad else leaf  # not a leaf: in-place ops work
        return t

    for name, module, args, kwargs in calls:
        call_args, call_kwargs = tree_map(fresh, (args, kwargs))
        outputs = [
            t
            for t in tree_flatten(module(*call_args, **call_kwargs))[0]
            if isinstance(t, torch.Tensor) and t.requires_grad
        ]
        if not outputs:
            continue
        with FlopCounterMode(display=False, custom_mapping=ADDITIONS) as counter:
            torch.autograd.backward(outputs, [torch.ones_like(t) for t in outputs])
        result[name][1] += counter.get_total_flops()
    model.zero_grad(set_to_none=True)
    # the whole backward ("Global": no module tracking involved) is the root's
    assert tracked_backward["Global"] == pytest.approx(result[""][1], rel=1e-9)
    return dict(result)


# --- the models ------------------------------------------------------------------------------


class DepthwiseCNN(nn.Module):
    """Depthwise-separable and grouped convolutions, 1d/2d, strided, dilated and transposed."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.depthwise = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pointwise = nn.Conv2d(16, 32, 1)
        self.grouped = nn.Conv2d(32, 32, 3, stride=2, padding=2, dilation=2, groups=4)
        self.up = nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1, groups=2)
        self.mix = nn.Conv1d(16, 8, 5, padding=2, groups=2)
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        x = F.relu(self.stem(x))
        x = F.relu(self.pointwise(self.depthwise(x)))
        x = self.up(self.grouped(x))
        x = self.mix(x.flatten(2))
        return self.head(x.mean(-1))


class CausalSelfAttention(nn.Module):
    """Attention with an explicit boolean causal mask (the kernels compute every pair)."""

    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class CausalLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 64)
        self.norm = nn.LayerNorm(64)
        self.attn = CausalSelfAttention()
        self.head = nn.Linear(64, 100)

    def forward(self, idx):
        x = self.embed(idx)
        return self.head(x + self.attn(self.norm(x)))


class Recurrent(nn.Module):
    """GRU, RNN and cells run on CPU as linear layers and gate math, which FlopCounterMode
    counts; oneDNN's LSTM layer (aten::mkldnn_rnn_layer) it counts as 0, and so does traceprof
    with the matrix families only (its RNN formulas are checked in tests/test_flops_rnn.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(16, 32)
        self.gru = nn.GRU(32, 32, num_layers=2, bidirectional=True)
        self.rnn = nn.RNN(64, 32, nonlinearity="relu")
        self.cell = nn.GRUCell(32, 32)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        y, _ = self.gru(self.lstm(x)[0])
        y, _ = self.rnn(y)
        h = None
        for t in range(y.shape[0]):
            h = self.cell(y[t], h)
        return self.head(h)


def _models():
    gen = torch.Generator().manual_seed(0)
    gpt = sample_models.GPTConfig(vocab_size=512, block_size=64, n_layer=2, n_head=4, d_model=64)
    bert = sample_models.BertConfig(
        vocab_size=512,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
    )
    mask = torch.ones(2, 32, dtype=torch.long)
    mask[1, 24:] = 0
    return {
        "lenet5": (sample_models.LeNet5, (torch.randn(4, 1, 32, 32, generator=gen),)),
        "resnet18": (
            lambda: sample_models.ResNet18(num_classes=10),
            (torch.randn(2, 3, 32, 32, generator=gen),),
        ),
        # is_causal=True: CPU flash attention, causal
        "gpt": (lambda: sample_models.GPT(gpt), (torch.randint(0, 512, (2, 64), generator=gen),)),
        # padding mask and dropout in training: the math fallback (matmuls, softmax, dropout)
        "bert": (
            lambda: sample_models.BertEncoder(bert),
            (torch.randint(0, 512, (2, 32), generator=gen), mask),
        ),
        "depthwise_cnn": (DepthwiseCNN, (torch.randn(2, 3, 32, 32, generator=gen),)),
        "causal_attention": (CausalLM, (torch.randint(0, 100, (2, 48), generator=gen),)),
        "recurrent": (Recurrent, (torch.randn(5, 3, 16, generator=gen),)),
    }


MODELS = _models()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """model -> (traceprof profile with matrix formulas, full profile, FlopCounterMode reference)"""
    out = {}

    def run(name):
        if name not in out:
            make, inputs = MODELS[name]
            torch.manual_seed(0)
            model = make()
            path = profile_once(
                model, *inputs, backward=True, path=tmp_path_factory.mktemp(name) / "trace.pt.trace.json.gz"
            )
            trace = traceprof.load_trace(path)
            matrix = traceprof.analyze(trace, formulas=REGISTRY.only(*MATRIX_FAMILIES))
            full = traceprof.analyze(trace)
            out[name] = (matrix, full, reference_flops(model, inputs))
        return out[name]

    return run


def _relative_error(got: float, want: float) -> float:
    if want == 0:
        return 0.0 if got == 0 else math.inf
    return abs(got - want) / want


@pytest.mark.parametrize("name", list(MODELS))
def test_per_module_flops_match_flopcountermode(compared, name):
    profile, _, reference = compared(name)
    profile.self_check()
    modules = {n.qualified_name: n for n in profile.nodes if n.kind is NodeKind.MODULE}
    assert set(reference) <= set(modules), set(reference) - set(modules)
    worst = {"forward": 0.0, "backward": 0.0}
    for qualified, node in modules.items():
        if qualified not in reference and node.calls == 0:
            continue  # a container never called (GPT's ModuleDict): FlopCounterMode has no row
        want = reference.get(qualified, [0.0, 0.0])
        for phase, expected in zip(("forward", "backward"), want):
            got = getattr(node, phase).total.flops
            error = _relative_error(got, expected)
            worst[phase] = max(worst[phase], error)
            assert error <= TOLERANCE, f"{name} {qualified or '(root)'} {phase}: {got} vs {expected}"
    counted = [q for q, (f, b) in reference.items() if f > 0 and b > 0]
    assert len(counted) >= 3, counted
    assert profile.flops.unsupported == () or all(
        "arguments not understood" not in u.name for u in profile.flops.unsupported
    )


def test_the_comparison_covers_what_it_claims(compared):
    """Grouped convolutions and causal attention are in the compared modules, and they matter."""
    _, _, cnn = compared("depthwise_cnn")
    assert cnn["depthwise"][0] > 0 and cnn["grouped"][1] > 0 and cnn["up"][1] > 0 and cnn["mix"][1] > 0
    # FlopCounterMode's unmodified weight-gradient formula would count the depthwise layer's
    # backward 16 (= groups) times larger: the per-group correction is what the test relies on
    x, w, g = [2, 16, 16, 16], [16, 1, 3, 3], [2, 16, 16, 16]
    args = (g, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 16, [False, True, False])
    plain = conv_backward_flop.__wrapped__(*args, out_shape=[None, w, None])
    assert plain == 16 * _conv_backward_per_group(*args, out_shape=[None, w, None])
    _, _, gpt = compared("gpt")
    attention = (
        gpt["transformer.h.0.attn"][0]
        - gpt["transformer.h.0.attn.c_attn"][0]
        - gpt["transformer.h.0.attn.c_proj"][0]
    )
    assert attention == pytest.approx(4 * 2 * 4 * (64 * 65 // 2) * 16)  # causal pairs, d = 16
    _, _, lm = compared("causal_attention")
    attention = lm["attn"][0] - lm["attn.qkv"][0] - lm["attn.proj"][0]
    assert attention == 4 * 2 * 4 * 48 * 48 * 16  # explicit mask: every pair is computed


@pytest.mark.parametrize("name", list(MODELS))
def test_every_op_of_the_models_has_a_formula(compared, name):
    """With all formulas, nothing in these models is unsupported, and non-matrix ops only add."""
    matrix, full, _ = compared(name)
    full.self_check()
    assert full.flops.unsupported == ()
    assert full.selection.flops > matrix.selection.flops
    for a, b in zip(full.nodes, matrix.nodes):
        assert a.qualified_name == b.qualified_name
        assert a.total.flops >= b.total.flops
        assert a.total.bytes_read > 0 or a.total.flops == 0

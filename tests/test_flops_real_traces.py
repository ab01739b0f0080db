"""FLOPs on real H100 traces (../shared/traces): attention and GEMM ops get the FLOPs their
models' dimensions give, and the summary shows achieved TFLOP/s and MFU against the H100's bf16
peak. Also: every shared trace analyzes with FLOPs, and coverage gaps are named."""

from __future__ import annotations

from collections import defaultdict
from functools import cache

import pytest

import traceprof
from traceprof.analysis.link import link
from traceprof.analysis.op_costs import count_ops
from traceprof.render import render

from .conftest import SHARED_TRACES

QWEN = SHARED_TRACES / "module_tree/h100_qwen1.5_0.5b_inference.json.gz"
BERT = SHARED_TRACES / "module_tree/h100_bert_small_inference.json.gz"
H100_BF16_PEAK = 989.5e12


@cache
def flops_by_op(path) -> dict[str, float]:
    trace = traceprof.load_trace(path)
    costs = count_ops(trace, link(trace))
    out: dict[str, float] = defaultdict(float)
    for event, flops in zip(costs.counted.tolist(), costs.flops.tolist()):
        out[trace.events.names[trace.events.name[event]]] += flops
    return dict(out)


@cache
def profile_of(path):
    return traceprof.analyze(path)


def causal_pairs(s: int) -> int:
    return s * (s + 1) // 2


# Qwen1.5-0.5B-Chat: 24 layers, hidden 1024, 16 heads of 64 (as many key/value heads),
# MLP 2816; the trace's batch is 16 sequences of 559 tokens, bf16, causal attention.
QWEN_TOKENS, QWEN_LAYERS, QWEN_HIDDEN, QWEN_MLP = 16 * 559, 24, 1024, 2816
QWEN_LINEAR = 2 * QWEN_TOKENS * (4 * QWEN_HIDDEN * QWEN_HIDDEN + 3 * QWEN_HIDDEN * QWEN_MLP)
QWEN_ATTENTION = 2 * 16 * 16 * causal_pairs(559) * (64 + 64)

# bert-small: 4 layers, hidden 512, 8 heads of 64, intermediate 2048, vocabulary 30522; one
# sequence of 141 tokens, bf16, no causal mask. 17 [512 x 512] projections (4 per layer and the
# MLM head's transform), 4 + 4 MLP matrices, the decoder.
BERT_LINEAR = 2 * 141 * (17 * 512 * 512 + 8 * 512 * 2048 + 512 * 30522)
BERT_ATTENTION = 2 * 8 * 141 * 141 * (64 + 64)


def test_qwen_gemm_and_attention_flops():
    by_op = flops_by_op(QWEN)
    assert by_op["aten::linear"] == QWEN_LAYERS * QWEN_LINEAR
    assert by_op["aten::_scaled_dot_product_flash_attention"] == QWEN_LAYERS * QWEN_ATTENTION
    # counted once: the ops inside them (addmm, mm, _flash_attention_forward) are not
    assert "aten::addmm" not in by_op and "aten::_flash_attention_forward" not in by_op
    p = profile_of(QWEN)
    p.self_check()
    assert p.flops.unsupported == ()
    layer = p.find("Qwen2Model_0.Qwen2DecoderLayer_3")
    mlp = p.find("Qwen2Model_0.Qwen2DecoderLayer_3.Qwen2MLP_3")
    attention = p.find("Qwen2Model_0.Qwen2DecoderLayer_3.Qwen2Attention_3")
    # gate, up and down projections (Linear children), SiLU (a child), act(gate) * up (own)
    assert mlp.forward.own.flops == QWEN_TOKENS * QWEN_MLP
    assert (
        mlp.forward.total.flops == 2 * QWEN_TOKENS * 3 * QWEN_HIDDEN * QWEN_MLP + 2 * QWEN_TOKENS * QWEN_MLP
    )
    gemm_and_attention = 2 * QWEN_TOKENS * 4 * QWEN_HIDDEN**2 + QWEN_ATTENTION
    assert attention.forward.total.flops == pytest.approx(gemm_and_attention, rel=0.01)
    assert attention.forward.total.flops > gemm_and_attention  # + rotary embedding arithmetic
    assert layer.forward.total.flops == pytest.approx(QWEN_LINEAR + QWEN_ATTENTION, rel=0.01)
    assert layer.backward.total.flops == 0


def test_bert_gemm_and_attention_flops():
    by_op = flops_by_op(BERT)
    assert by_op["aten::linear"] == BERT_LINEAR
    assert by_op["aten::_scaled_dot_product_flash_attention"] == 4 * BERT_ATTENTION
    p = profile_of(BERT)
    p.self_check()
    assert p.flops.unsupported == ()
    assert p.selection.flops == pytest.approx(BERT_LINEAR + 4 * BERT_ATTENTION, rel=0.01)


@pytest.mark.parametrize("path", [QWEN, BERT], ids=["qwen", "bert"])
def test_summary_shows_achieved_tflops_and_mfu_against_the_h100_bf16_peak(path):
    p = profile_of(path)
    peak = p.flops.peak
    assert (peak.device, peak.precision, peak.flop_per_s) == ("H100 SXM", "bf16", H100_BF16_PEAK)
    assert p.flops.precision == "bf16"
    rates = p.throughput(p.selection)
    assert rates.flop_per_s == pytest.approx(p.selection.flops / (p.selection.gpu_busy_us * 1e-6))
    assert rates.mfu == pytest.approx(rates.flop_per_s / H100_BF16_PEAK)
    assert 0.01 < rates.mfu < 0.6
    assert 0 < rates.bandwidth_use < 1
    tree = render(p, "tree")
    achieved = next(line for line in tree.splitlines() if line.startswith("achieved:"))
    assert "TFLOP/s over GPU busy time" in achieved
    assert f"MFU {rates.mfu * 100:.1f}% of the H100 SXM bf16 peak 990 TFLOP/s" in achieved
    table = render(p, "table")
    assert "FLOP/s" in table and "MFU" in table


def test_qwen_mlp_runs_near_half_the_h100_peak():
    """The GEMM-bound MLPs reach a plausible fraction of the peak; the norms do not."""
    p = profile_of(QWEN)
    mlp = p.throughput(p.find("Qwen2Model_0.Qwen2DecoderLayer_3.Qwen2MLP_3").total)
    norm = p.throughput(p.find("Qwen2Model_0.Qwen2DecoderLayer_3.Qwen2RMSNorm_6").total)
    assert 0.3 < mlp.mfu < 0.8
    assert norm.mfu < 0.01 and norm.bandwidth_use > 0.2


SHARED = sorted(SHARED_TRACES.glob("*/*.json.gz"))
#: traces with shapes whose steps run no op that computes: allocations and gloo all-reduces
#: (cpu_only); a fill, a barrier and NCCL all-reduce / send / recv on each rank of the T4 job
#: (multi_rank_t4, see ../shared/traces/SOURCES.md)
NO_COMPUTE = {
    "cpu_only/cpu_only_rank34.pt.trace.json.gz",
    *(f"multi_rank_t4/t4x4_p2p_sendrecv_step100_rank{r}.pt.trace.json.gz" for r in range(4)),
}


@pytest.mark.parametrize("path", SHARED, ids=lambda p: f"{p.parent.name}/{p.name[:32]}")
def test_every_shared_trace_gets_flops_or_says_it_cannot(path):
    p = profile_of(path)
    p.self_check()
    if p.flops.has_shapes:
        no_compute = f"{path.parent.name}/{path.name}" in NO_COMPUTE
        assert (p.selection.flops == 0) == no_compute
        if no_compute:  # nothing computes, yet the step has work, and its time is counted
            assert p.selection.gpu_busy_us > 0 or p.selection.cpu_us > 0
        for u in p.flops.unsupported:
            assert u.calls > 0 and 0 <= u.share_of_step <= 1.0 + 1e-9
    else:
        assert any("without shapes" in w for w in p.warnings)
        assert p.selection.flops == 0

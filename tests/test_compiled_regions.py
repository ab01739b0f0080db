"""Compiled regions and graph replays in traces without traceprof's compiled-kernel table
(captured by others): their share of the step is named in a warning, with the forward/backward
split and the kernel families, never left silent. Tiny traces for each rule, then the real
traces of compiled models and graph replays in ../shared/traces."""

from __future__ import annotations

import re

import pytest

import traceprof
from traceprof.analysis.compiled_regions import kernel_families

from .conftest import SHARED_TRACES
from .tracebuilder import TraceBuilder

COMPILED = re.compile(
    r"(\d+(?:\.\d)?)% of the step's (GPU busy|CPU) time ran in compiled regions \((\d+) forward "
    r"runs(?: of (\d+) compiled frames?)?, (\d+) backward runs; forward (\d+(?:\.\d)?)%, "
    r"backward (\d+(?:\.\d)?)%\) without module information"
)
REPLAYED = re.compile(
    r"(\d+\.\d)% of the step's GPU busy time is (\d+) kernels replayed from (\d+) graph launch"
)


def warning(profile, pattern):
    found = [m for w in profile.warnings if (m := pattern.search(w))]
    assert len(found) <= 1
    return found[0] if found else None


def compiled_step(b: TraceBuilder) -> TraceBuilder:
    """A step: an eager module (40 us of kernels), a compiled region in the forward (a pointwise
    and a GEMM kernel, 60 us) and its compiled backward (a reduction kernel, 100 us)."""
    b.step(1, 0, 1000)
    b.scope("", "Net", 10, 400)
    b.scope("embed", "Embedding", 20, 50)
    b.op("aten::embedding", 25, 30)
    b.launch(30, 100, 40, name="void at::native::indexSelectLargeIndex")
    b.op("Torch-Compiled Region: 0/0", 80, 300)
    b.op("CompiledFunction", 90, 280, seq=7)
    b.annotation("## Call CompiledFxGraph fabc ##", 100, 250)
    b.op("triton_poi_fused_add_gelu_0", 110, 20)
    b.launch(115, 200, 20, name="triton_poi_fused_add_gelu_0")
    b.op("aten::mm", 140, 50)
    b.launch(150, 230, 40, name="ampere_sgemm_128x64_nn")
    b.op("autograd::engine::evaluate_function: CompiledFunctionBackward", 500, 300, tid=2)
    b.op("CompiledFunctionBackward", 510, 280, tid=2, seq=7, fwd_tid=1)
    b.annotation("## Call CompiledFxGraph fdef ##", 520, 250, tid=2)
    b.op("triton_red_fused_sum_0", 530, 20, tid=2)
    b.launch(535, 600, 100, tid=2, name="triton_red_fused_sum_0")
    return b


def test_compiled_regions_without_table_are_named_with_their_share_and_split(analyze_built):
    p = analyze_built(compiled_step(TraceBuilder()))
    m = warning(p, COMPILED)
    assert m is not None
    # 160 of the step's 200 us of kernels ran inside compiled regions: 60 forward, 100 backward
    assert (m.group(1), m.group(2), m.group(6), m.group(7)) == ("80.0", "GPU busy", "30.0", "50.0")
    assert m.group(3, 4, 5) == ("1", "1", "1")  # a forward run of one frame, its backward run
    text = next(w for w in p.warnings if m.group(0) in w)
    assert "reduction 50.0%, GEMM/extern 20.0%, pointwise 10.0%" in text
    assert "traceprof.capture.profile" in text
    assert warning(p, REPLAYED) is None


def test_compiled_work_on_a_cpu_only_trace_is_measured_in_cpu_time(analyze_built):
    b = TraceBuilder()
    b.top["deviceProperties"] = []
    b.step(1, 0, 1000)
    b.op("aten::relu", 10, 100)
    b.op("Torch-Compiled Region: 0/0", 200, 400)
    b.annotation("## Call CompiledFxGraph None ##", 210, 300)
    b.op("graph_0_cpp_fused_gelu_0", 220, 150)
    b.op("aten::addmm", 380, 100)
    p = analyze_built(b)
    m = warning(p, COMPILED)
    assert m is not None and m.group(2) == "CPU"
    # the regions' exclusive CPU time (400 us of the step's 1000) against the whole step
    assert float(m.group(1)) == pytest.approx(100 * 400 / p.selection.cpu_us, abs=0.05)
    assert "C++ kernel" in next(w for w in p.warnings if m.group(0) in w)


def test_graph_replays_are_named_with_their_kernels_and_launches(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.op("aten::add", 10, 20)
    b.launch(15, 50, 10, name="elementwise_kernel")
    b.op("forward", 100, 300)
    corr = 5000
    b.events.append(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaGraphLaunch",
            "pid": b.pid,
            "tid": 1,
            "ts": 110,
            "dur": 5,
            "args": {"correlation": corr},
        }
    )
    for i, (name, dur) in enumerate((("sm90_xmma_gemm_bf16", 60), ("flash_fwd_kernel", 30))):
        b.events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": 7,
                "ts": 200 + 100 * i,
                "dur": dur,
                "args": {"correlation": corr, "stream": 7, "device": 0},
            }
        )
    p = analyze_built(b)
    m = warning(p, REPLAYED)
    assert m is not None
    assert (m.group(1), m.group(2), m.group(3)) == ("90.0", "2", "1")
    text = next(w for w in p.warnings if m.group(0) in w)
    assert "(cudaGraphLaunch)" in text and "GEMM/extern 60.0%, attention 30.0%" in text
    assert warning(p, COMPILED) is None


def test_an_eager_trace_gets_neither_warning(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.scope("", "Net", 5, 90)
    b.op("aten::mm", 10, 50)
    b.launch(20, 30, 40, name="ampere_sgemm_128x64_nn")
    p = analyze_built(b)
    assert warning(p, COMPILED) is None and warning(p, REPLAYED) is None


def test_kernel_families_by_name():
    names = [
        "triton_per_fused_sum_3",
        "triton_red_fused_var_1",
        "triton_poi_fused_mul_2",
        "triton_tem_fused_mm_0",
        "graph_3_cpp_fused_add_0",
        "flash_fwd_splitkv_kernel",
        "Cijk_Alik_Bljk_BBS_BH",
        "void at::native::vectorized_elementwise_kernel<4>",
    ]
    assert kernel_families(names) == [
        "persistent reduction",
        "reduction",
        "pointwise",
        "template",
        "C++ kernel",
        "attention",
        "GEMM/extern",
        "other",
    ]


@pytest.mark.parametrize(
    "path, share, pattern",
    [
        ("compiled/rtx4090d_mlp_graph_breaks_compiled_train.json.gz", 85.3, COMPILED),
        ("gpu_attribution/torch_compile_triton.json.gz", 100.0, COMPILED),
        ("gpu_attribution/a100_training_rank0_of_16.json.gz", 23.3, COMPILED),
        ("compiled/mi300_vllm_piecewise_graph_execution.json.gz", 96.0, REPLAYED),
        ("cuda_graphs/mi300_sglang_qwen3_8b_decode.json.gz", 98.8, REPLAYED),
    ],
    ids=["4090-graph-breaks", "mi300-triton", "a100-compiled-backward", "vllm-piecewise", "sglang-decode"],
)
def test_real_compiled_and_replayed_traces_say_how_much_has_no_module(path, share, pattern):
    p = traceprof.analyze(SHARED_TRACES / path)
    p.self_check()
    m = warning(p, pattern)
    assert m is not None and float(m.group(1)) == pytest.approx(share, abs=0.05)
    # the warning is in the report's header and in the JSON document
    assert m.group(0) in traceprof.render.render(p, "tree")
    assert m.group(0) in traceprof.render.render(p, "json")

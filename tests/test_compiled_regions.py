"""Compiled regions and graph replays in traces without traceprof's compiled-kernel table
(captured by others): their share of the step is named in a warning, with the forward/backward
split and the kernel families, never left silent. Tiny traces for each rule, then the real
traces of compiled models and graph replays in ../shared/traces."""

from __future__ import annotations

import json
import re

import pytest

import traceprof
from traceprof.analysis.compiled_regions import kernel_families
from traceprof.render.tree import summarize
from traceprof.result.model import NodeKind

from .conftest import SHARED_TRACES
from .tracebuilder import TraceBuilder

COMPILED = re.compile(
    r"(\d+(?:\.\d)?)% of the step's (GPU busy|CPU) time ran in compiled regions \((\d+) forward "
    r"runs?(?: of (\d+) compiled frames?)?, (\d+) backward runs?; forward (\d+(?:\.\d)?)%, "
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
    graph_launch(b, 110, [("sm90_xmma_gemm_bf16", 200, 60), ("flash_fwd_kernel", 300, 30)])
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


# -- the work without module information, grouped in the tree (group nodes) -----------------


def node_at(profile, *path):
    found = [n for n in profile.nodes if tuple(n.path) == path]
    assert len(found) == 1, [n.path for n in profile.nodes]
    return found[0]


def children_of(profile, node):
    return {profile.nodes[c].name: profile.nodes[c] for c in node.children}


def test_compiled_work_is_grouped_under_its_module_by_graph_and_kernel_family(analyze_built):
    p = analyze_built(compiled_step(TraceBuilder()))
    net = node_at(p, "")
    assert set(children_of(p, net)) == {"embed", "[compiled 0/0 forward]", "[compiled 0/0 backward]"}
    fwd = node_at(p, "", "[compiled 0/0 forward]")
    assert fwd.kind is NodeKind.COMPILED and fwd.calls == 1
    assert fwd.qualified_name == "[compiled 0/0 forward]"
    families = children_of(p, fwd)
    assert set(families) == {"[pointwise]", "[GEMM/extern]"}
    assert families["[pointwise]"].forward.total.gpu_busy_us == pytest.approx(20)
    assert families["[GEMM/extern]"].forward.total.gpu_busy_us == pytest.approx(40)
    assert families["[GEMM/extern]"].forward.total.kernels == 1
    assert families["[pointwise]"].forward.total.cpu_us == pytest.approx(20)  # the op and its launch
    # the backward graph, matched to its forward through the Sequence number: backward work
    bwd = node_at(p, "", "[compiled 0/0 backward]", "[reduction]")
    assert bwd.kind is NodeKind.COMPILED
    assert bwd.backward.total.gpu_busy_us == pytest.approx(100) and bwd.forward.total == bwd.forward.own
    # the module keeps its own work and its eager submodule; nothing is left at the root
    assert net.forward.own.gpu_busy_us == 0 and net.total.gpu_busy_us == pytest.approx(200)
    assert p.module_nodes == 2  # the group nodes are not counted as modules


def test_a_compiled_region_outside_every_module_is_a_root_group(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.op("Torch-Compiled Region: 1/0", 100, 300)
    b.op("triton_per_fused_softmax_0", 110, 20)
    b.launch(115, 200, 30, name="triton_per_fused_softmax_0")
    b.op("aten::bmm", 140, 50)
    b.launch(150, 240, 50, name="Cijk_Ailk_Bljk_HHS_BH")
    b.op("aten::relu", 500, 50)
    b.launch(510, 600, 20, name="elementwise_kernel")
    p = analyze_built(b)
    graph = node_at(p, "[compiled 1/0 forward]")
    assert graph.id in p.roots and graph.kind is NodeKind.COMPILED
    assert set(children_of(p, graph)) == {"[persistent reduction]", "[GEMM/extern]"}
    # roots + (not in any module) = the step
    assert sum(p.nodes[r].total.gpu_busy_us for r in p.roots) == pytest.approx(p.selection.gpu_busy_us)
    assert graph.total.gpu_busy_us == pytest.approx(80)
    # the DeepSpeed summary counts it outside the modules, as a diff's "where" line does
    summary = summarize(p)
    assert summary.modules_fwd_us == 0 and summary.outside_fwd_us == pytest.approx(80)
    assert summary.fwd_us == pytest.approx(80)  # the relu outside is in neither pass


def test_module_scopes_inside_a_compiled_region_keep_their_work(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.scope("", "Net", 10, 500)
    b.op("Torch-Compiled Region: 0/0", 20, 400)
    b.scope("attn", "Attention", 30, 100)
    b.op("flash_fwd_kernel", 40, 50)
    b.launch(45, 100, 60, name="flash_fwd_kernel")
    b.op("triton_poi_fused_add_0", 200, 30)
    b.launch(205, 300, 10, name="triton_poi_fused_add_0")
    p = analyze_built(b)
    attn = node_at(p, "", "attn")
    assert attn.kind is NodeKind.MODULE and attn.forward.own.gpu_busy_us == pytest.approx(60)
    graph = node_at(p, "", "[compiled 0/0 forward]")
    assert set(children_of(p, graph)) == {"[pointwise]"}
    assert graph.total.gpu_busy_us == pytest.approx(10)


def test_inductor_call_scope_is_not_a_user_annotation(analyze_built):
    # a trace without module events: its tree comes from the user's annotations, and the scope
    # Inductor opens around each run of a compiled graph is not one of them
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.annotation("## forward ##", 10, 500)
    b.op("Torch-Compiled Region: 0/0", 20, 400)
    b.op("CompiledFunction", 25, 380)
    b.annotation("## Call CompiledFxGraph fabc ##", 30, 350)
    b.op("aten::mm", 40, 50)
    b.launch(45, 100, 60, name="ampere_sgemm_128x64_nn")
    b.op("triton_poi_fused_add_0", 200, 30)
    b.launch(205, 300, 10, name="triton_poi_fused_add_0")
    p = analyze_built(b)
    assert not [n for n in p.nodes if n.name.startswith("## Call CompiledFxGraph")]
    graph = node_at(p, "## forward ##", "[compiled 0/0 forward]")
    assert graph.total.gpu_busy_us == pytest.approx(70)
    assert {k: c.total.gpu_busy_us for k, c in children_of(p, graph).items()} == pytest.approx(
        {"[GEMM/extern]": 60, "[pointwise]": 10}
    )


def test_compiled_work_on_a_cpu_only_trace_is_grouped_by_kernel_family(analyze_built):
    b = TraceBuilder()
    b.top["deviceProperties"] = []
    b.step(1, 0, 1000)
    b.scope("", "Net", 5, 900)
    b.op("Torch-Compiled Region: 0/0", 200, 400)
    b.annotation("## Call CompiledFxGraph None ##", 210, 300)
    b.op("graph_0_cpp_fused_gelu_0", 220, 150)
    b.op("aten::addmm", 380, 100)
    b.op("aten::copy_", 400, 30)
    p = analyze_built(b)
    families = children_of(p, node_at(p, "", "[compiled 0/0 forward]"))
    assert set(families) == {"[C++ kernel]", "[GEMM/extern]"}
    assert families["[C++ kernel]"].forward.total.cpu_us == pytest.approx(150)
    # the extern call with what it nests
    assert families["[GEMM/extern]"].forward.total.cpu_us == pytest.approx(100)


def graph_launch(b: TraceBuilder, ts: float, kernels: list[tuple[str, float, float]], tid: int = 1) -> None:
    """A cudaGraphLaunch at ``ts`` whose kernels (name, start, duration) share its correlation."""
    b._corr += 1
    b.events.append(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaGraphLaunch",
            "pid": b.pid,
            "tid": tid,
            "ts": ts,
            "dur": 5,
            "args": {"correlation": b._corr},
        }
    )
    for name, start, dur in kernels:
        b.events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": 7,
                "ts": start,
                "dur": dur,
                "args": {"correlation": b._corr, "stream": 7, "device": 0},
            }
        )


DECODE = [("sm90_xmma_gemm_bf16", 0, 60), ("flash_fwd_kernel", 100, 30), ("sm90_xmma_gemm_bf16", 200, 40)]


def test_graph_replays_are_grouped_per_graph_and_kernel_family(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 3000)
    b.scope("", "Model", 10, 2900)
    for at in (100, 1000):  # the same graph twice
        graph_launch(b, at, [(n, at + 100 + s, d) for n, s, d in DECODE])
    graph_launch(b, 2000, [("triton_poi_fused_0", 2100, 10)])  # another graph
    p = analyze_built(b)
    first = node_at(p, "", "[graph replay 0]")
    assert first.kind is NodeKind.COMPILED and first.calls == 2
    families = children_of(p, first)
    assert set(families) == {"[GEMM/extern]", "[attention]"}
    assert families["[GEMM/extern]"].forward.total.gpu_busy_us == pytest.approx(200)
    assert families["[GEMM/extern]"].forward.total.kernels == 4
    assert families["[attention]"].forward.total.gpu_busy_us == pytest.approx(60)
    assert first.forward.own.cpu_us == pytest.approx(10)  # the two launches
    second = node_at(p, "", "[graph replay 1]")
    assert set(children_of(p, second)) == {"[pointwise]"} and second.calls == 1
    m = warning(p, REPLAYED)
    assert m is not None and m.group(2) == "7"
    assert "[graph replay <n>]" in next(w for w in p.warnings if m.group(0) in w)


def capture(
    b: TraceBuilder, ts: float, modules: list[str], tid: int = 1, kernels: list[str] | None = None
) -> None:
    """A graph capture at ``ts``: one launch per module scope (qualified names under the
    root); with ``kernels``, the i-th launch's kernel is in the trace (joined by correlation),
    else no kernel runs."""
    runtime = {"ph": "X", "cat": "cuda_runtime", "pid": b.pid, "tid": tid, "dur": 1}
    b.events.append({**runtime, "name": "cudaStreamBeginCapture", "ts": ts, "args": {"correlation": 1}})
    b.scope("", "Model", ts + 5, 100 * len(modules) + 10, tid=tid)
    for k, module in enumerate(modules):
        at = ts + 10 + 100 * k
        b.scope(module, "Linear" if "proj" in module else "Attention", at, 90, tid=tid)
        b.op("aten::mm", at + 5, 50, tid=tid)
        if kernels:
            b.launch(at + 10, at + 20, 5, tid=tid, name=kernels[k])
            continue
        b._corr += 1
        b.events.append(
            {**runtime, "name": "cudaLaunchKernel", "ts": at + 10, "args": {"correlation": b._corr}}
        )
    end = ts + 100 * len(modules) + 20
    b.events.append({**runtime, "name": "cudaStreamEndCapture", "ts": end, "args": {"correlation": 2}})


DECODE_KERNELS = [name for name, _, _ in DECODE]


def replay_decode(b: TraceBuilder) -> None:
    """A profiled step that replays the decode graph (the kernels of DECODE) once."""
    b.step(1, 1000, 3000)
    b.op("decode", 1010, 2900)
    graph_launch(b, 1100, [(n, 1200 + s, d) for n, s, d in DECODE])


def test_replayed_kernels_go_to_the_modules_of_their_captured_launches(analyze_built):
    b = TraceBuilder()
    capture(b, 0, ["q_proj", "attn", "o_proj"], kernels=DECODE_KERNELS)  # before the profiled step
    replay_decode(b)
    p = analyze_built(b)
    # the i-th kernel of the replay goes to the module of the i-th launch of the capture
    for path, gpu in ((("", "q_proj"), 60), (("", "attn"), 30), (("", "o_proj"), 40)):
        assert node_at(p, *path).forward.total.gpu_busy_us == pytest.approx(gpu)
    graph = node_at(p, "[graph replay 0]")  # the launch (outside the modules): its CPU time
    assert graph.children == () and graph.total.gpu_busy_us == 0
    assert warning(p, REPLAYED) is None  # every replayed kernel has its module


def test_a_capture_of_another_length_is_not_used(analyze_built):
    b = TraceBuilder()
    capture(b, 0, ["q_proj", "o_proj"])
    b.step(1, 1000, 3000)
    b.op("decode", 1010, 2900)
    graph_launch(b, 1100, [(n, 1200 + s, d) for n, s, d in DECODE])
    p = analyze_built(b)
    assert node_at(p, "", "q_proj").total.gpu_busy_us == 0
    assert set(children_of(p, node_at(p, "[graph replay 0]"))) == {"[GEMM/extern]", "[attention]"}


UNMATCHED = re.compile(r"\((\d+) replayed kernels matched no capture in the trace")


def test_a_replay_goes_to_the_capture_with_its_kernels_not_to_the_latest_of_its_length(analyze_built):
    b = TraceBuilder()
    capture(b, 0, ["q_proj", "attn", "o_proj"], kernels=DECODE_KERNELS)  # the decode graph
    mlp = ["sm90_xmma_gemm_bf16", "triton_poi_fused_gelu_0", "sm90_xmma_gemm_bf16"]
    capture(b, 500, ["up_proj", "act", "down_proj"], kernels=mlp)  # another graph, as many kernels
    replay_decode(b)
    p = analyze_built(b)
    for path, gpu in ((("", "q_proj"), 60), (("", "attn"), 30), (("", "o_proj"), 40)):
        assert node_at(p, *path).forward.total.gpu_busy_us == pytest.approx(gpu)
    for module in ("up_proj", "act", "down_proj"):
        assert node_at(p, "", module).total.gpu_busy_us == 0
    assert warning(p, REPLAYED) is None


@pytest.mark.parametrize("kernels", [None, ["sm90_xmma_gemm_bf16", "triton_poi_fused_gelu_0", "gemv"]])
def test_a_replay_whose_kernels_no_capture_has_stays_in_its_family_nodes(analyze_built, kernels):
    b = TraceBuilder()
    capture(b, 0, ["q_proj", "attn", "o_proj"])  # the captured launches' kernels are not in the trace
    capture(b, 500, ["up_proj", "act", "down_proj"], kernels=kernels)
    replay_decode(b)
    p = analyze_built(b)
    for module in ("q_proj", "attn", "o_proj", "up_proj", "act", "down_proj"):
        assert node_at(p, "", module).total.gpu_busy_us == 0
    families = children_of(p, node_at(p, "[graph replay 0]"))
    assert families["[GEMM/extern]"].total.gpu_busy_us == pytest.approx(100)
    assert families["[attention]"].total.gpu_busy_us == pytest.approx(30)
    m = warning(p, REPLAYED)
    assert m is not None and m.group(2) == "3"
    assert any((u := UNMATCHED.search(w)) and u.group(1) == "3" for w in p.warnings)


def test_captures_of_one_graph_with_different_modules_are_not_guessed_between(analyze_built):
    b = TraceBuilder()
    capture(b, 0, ["q_proj", "attn", "o_proj"], kernels=DECODE_KERNELS)
    capture(b, 500, ["up_proj", "act", "down_proj"], kernels=DECODE_KERNELS)  # same kernels
    replay_decode(b)
    p = analyze_built(b)
    assert node_at(p, "", "q_proj").total.gpu_busy_us == 0
    assert node_at(p, "", "up_proj").total.gpu_busy_us == 0
    assert any((u := UNMATCHED.search(w)) and u.group(1) == "3" for w in p.warnings)


def test_group_nodes_are_records_of_kind_compiled_and_match_in_a_diff(tmp_path):
    path = compiled_step(TraceBuilder()).write(tmp_path / "t.json")
    p = traceprof.analyze(path)
    doc = json.loads(traceprof.render.render(p, "json"))
    kinds = {n["qualified_name"]: n["kind"] for n in doc["nodes"]}
    assert kinds["[compiled 0/0 forward].[pointwise]"] == "compiled"
    csv = traceprof.render.render(p, "csv")
    assert "[compiled 0/0 backward].[reduction]" in csv
    d = traceprof.diff(path, path)
    status = {n.qualified_name: n.status.value for n in d.nodes}
    assert status["[compiled 0/0 forward].[pointwise]"] == "matched"
    assert status["[compiled 0/0 backward]"] == "matched"


@pytest.mark.parametrize(
    "path, graph, families",
    [
        (
            "compiled/rtx4090d_mlp_graph_breaks_compiled_train.json.gz",
            ("[compiled 0/0 backward]",),
            {"[GEMM/extern]", "[pointwise]", "[reduction]"},
        ),
        (  # no module events: Inductor's own call scope is not taken for a user annotation
            "gpu_attribution/torch_compile_triton.json.gz",
            ("[compiled 0/0 forward]",),
            {"[GEMM/extern]", "[attention]", "[pointwise]", "[reduction]"},
        ),
        (
            "gpu_attribution/a100_training_rank0_of_16.json.gz",
            ("## forward ##", "DistributedDataParallel.forward", "[compiled backward]"),
            {"[other]", "[graph replay 8]", "[graph replay 13]"},
        ),
        (
            "compiled/mi300_vllm_piecewise_graph_execution.json.gz",
            ("GptOssForCausalLM_0", "GraphModule_0", "[graph replay 1]"),
            {"[GEMM/extern]", "[pointwise]", "[other]"},
        ),
        (
            "cuda_graphs/mi300_sglang_qwen3_8b_decode.json.gz",
            ("[graph replay 0]",),
            {"[GEMM/extern]", "[attention]", "[other]"},
        ),
    ],
    ids=["4090-graph-breaks", "mi300-triton", "a100-compiled-backward", "vllm-piecewise", "sglang-decode"],
)
def test_real_compiled_and_replayed_traces_group_their_work(path, graph, families):
    p = traceprof.analyze(SHARED_TRACES / path)
    p.self_check()  # every node, the group nodes too: total = own + children
    node = node_at(p, *graph)
    assert node.kind is NodeKind.COMPILED and node.calls >= 1
    assert families <= set(children_of(p, node))
    for child in children_of(p, node).values():
        assert child.kind is NodeKind.COMPILED
    # roots + (not in any module) = the step
    roots = sum(p.nodes[r].total.gpu_busy_us for r in p.roots)
    assert roots == pytest.approx(p.selection.gpu_busy_us, rel=1e-6)


def test_a_diff_side_has_the_per_step_times_of_the_group_nodes():
    """A diff's per-step detail (the spread of each node) is built on the same tree as the
    profile, group nodes of compiled work included, so their changes get a spread too."""
    from traceprof.compare.side import side_of

    side = side_of(SHARED_TRACES / "compiled/rtx4090d_mlp_graph_breaks_compiled_train.json.gz")
    grouped = {path for path, _ in side.node_steps if any(part.startswith("[compiled") for part in path)}
    in_profile = {n.path for n in side.profile.nodes if n.kind.value == "compiled"}
    assert in_profile and grouped == in_profile

"""Kernel labels that PyTorch's own tools write into traces, read where a trace has them: tiny
traces built to the formats read at their sources (docs/trace-conventions.md "Kernel labels").

- ``torch.cuda._annotate_cuda_graph_trace.annotate_trace`` (torch 2.13): each key of each
  annotation dict of a kernel's ``graph node id`` becomes an arg, ``args[key] = str(value)``;
  torchtitan's ``annotate_module_fqns`` + ``insert_kernel_annotations_pass`` fill them with
  ``{"module_fqn": "<qualified name>"}``.
- PyTorch PR #187061 (``triton.cudagraph_kernel_annotations``): ``mark_kernels("<label>")``, a
  plain string, so ``args["str"]``: ``"L.model.layers.0.fc1.linear"``, a fused kernel's
  modules joined by ``" + "``; some revisions append the FX node's op name.
- torch's CUPTI monitor (``torch.profiler._cupti_monitor_trace``): a list of annotations as one
  JSON text in ``args["annotation"]``.
- ``torch._inductor.profiler.inductor_trace_handler`` (torch 2.14): ``args["stack"]``, the list
  of source stacks (FX ``stack_trace`` texts) of the nodes a kernel computes.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

import traceprof
from traceprof.read.build import check_trace, load_trace

from .test_compiled_regions import REPLAYED, children_of, node_at, warning
from .tracebuilder import TraceBuilder

#: the kernels of one replay of a decoder block's graph: (name, start, duration, label args)
BLOCK = [
    ("sm90_xmma_gemm_bf16", 0, 60, {"module_fqn": "layers.0.attention.wq"}),
    ("flash_fwd_kernel", 100, 30, {"module_fqn": "layers.0.attention"}),
    ("triton_poi_fused_add_mul_silu_0", 200, 20, {"module_fqn": "layers.0.feed_forward"}),
    ("triton_red_fused_mean_pow_1", 300, 10, {"module_fqn": "norm"}),
    ("triton_red_fused_nll_loss_2", 400, 10, {"module_fqn": "loss"}),
]
MODULES = [
    ("", "Transformer"),
    ("layers", "ModuleList"),
    ("layers.0", "TransformerBlock"),
    ("layers.0.attention", "Attention"),
    ("layers.0.attention.wq", "Linear"),
    ("layers.0.feed_forward", "FeedForward"),
    ("layers.0.feed_forward.w1", "Linear"),
    ("layers.0.feed_forward.act", "SiLU"),
    ("norm", "RMSNorm"),
]


def module_table(b: TraceBuilder, modules) -> TraceBuilder:
    doc = {
        "format": "traceprof.modules",
        "version": 1,
        "modules": [{"name": n, "class": c} for n, c in modules],
    }
    b.top["traceprof"] = base64.b64encode(json.dumps(doc).encode()).decode()
    return b


def labelled_launch(b: TraceBuilder, ts: float, kernels, tid: int = 1, name: str = "cudaGraphLaunch") -> None:
    """A graph launch at ``ts`` whose kernels (name, start, duration, label args) share its
    correlation; each kernel carries a ``graph node id`` and its labels, as ``annotate_trace``
    writes them."""
    b._corr += 1
    runtime = {"ph": "X", "cat": "cuda_runtime", "pid": b.pid, "tid": tid, "dur": 5}
    b.events.append({**runtime, "name": name, "ts": ts, "args": {"correlation": b._corr}})
    for node_id, (kernel, start, dur, labels) in enumerate(kernels):
        args = {"correlation": b._corr, "stream": 7, "device": 0, "graph node id": (1 << 32) + node_id}
        args.update({k: str(v) for k, v in labels.items()})
        b.events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": kernel,
                "pid": 0,
                "tid": 7,
                "ts": ts + 10 + start,
                "dur": dur,
                "args": args,
            }
        )


def torchtitan_step(b: TraceBuilder, ts: float = 0, n: int = 1) -> TraceBuilder:
    """A step that replays the block's graph from inside the model's scope."""
    b.step(n, ts, 1000)
    b.scope("", "Transformer", ts + 5, 900)
    labelled_launch(b, ts + 10, BLOCK)
    return b


# -- reading ---------------------------------------------------------------------------------------


def test_labels_are_read_into_a_side_table_the_same_whole_or_run_by_run(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 100000)
    for i in range(200):
        b.op("aten::add", 10 + i * 400, 20)
        k = b.launch(15 + i * 400, 40 + i * 400, 5, name=f"k{i % 3}")
        if i % 3 == 0:
            k["args"]["module_fqn"] = f"layers.{i % 4}"
        if i % 5 == 0:
            k["args"]["str"] = "L.layers.0.mlp + L.layers.0.attn"
        if i % 7 == 0:
            k["args"]["stack"] = ['  File "/x/m.py", line 3, in forward\n    y = self.fc(x)\n']
        if i == 4:
            k["args"]["annotation"] = json.dumps([{"module_fqn": "norm"}])
    path = b.write(tmp_path / "t.json")
    whole = load_trace(path, cache=False)
    runs = load_trace(path, cache=False, chunk_bytes=2000, jobs=1)
    for t in (whole, runs):
        check_trace(t)
    assert whole.labels is not None and runs.labels is not None
    labelled = [i for i in range(200) if i % 3 == 0 or i % 5 == 0 or i % 7 == 0 or i == 4]
    assert len(whole.labels) == len(labelled)
    for field in ("event", "module_fqn", "text", "annotation", "stack"):
        assert np.array_equal(getattr(whole.labels, field), getattr(runs.labels, field))
    assert whole.events.texts == runs.events.texts
    texts = whole.events.texts
    first = whole.labels
    assert texts[first.module_fqn[0]] == b'"layers.0"' and first.text[0] >= 0 and first.stack[0] >= 0
    assert whole.events.names[whole.events.name[first.event[0]]] == "k0"
    assert first.annotation[first.annotation >= 0].size == 1


def test_a_trace_without_labels_has_no_side_table(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.op("aten::add", 10, 20)
    b.launch(15, 40, 5)
    assert load_trace(b.write(tmp_path / "t.json"), cache=False).labels is None


def test_labels_on_cpu_events_are_not_read(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.op("aten::add", 10, 20, module_fqn="layers.0", str="L.x")
    assert load_trace(b.write(tmp_path / "t.json"), cache=False).labels is None


def test_a_deeply_nested_label_is_cut_not_fatal(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.op("aten::add", 10, 20)
    k = b.launch(15, 40, 5)
    k["args"]["annotation"] = "@DEEP@"
    path = tmp_path / "t.json"
    path.write_text(json.dumps(b.document()).replace('"@DEEP@"', "[" * 3000 + "]" * 3000))
    trace = load_trace(path, cache=False)  # an "Input Dims" so deep is refused: a label is optional
    assert trace.labels is not None and trace.events.texts[trace.labels.annotation[0]] == b"null"


# -- module labels: torchtitan's module_fqn ---------------------------------------------------------


def test_module_fqn_labels_put_replayed_kernels_in_their_modules(analyze_built):
    b = module_table(torchtitan_step(TraceBuilder()), MODULES)
    p = analyze_built(b)
    assert node_at(
        p, "", "layers", "layers.0", "layers.0.attention", "layers.0.attention.wq"
    ).forward.total.gpu_busy_us == pytest.approx(60)
    attention = node_at(p, "", "layers", "layers.0", "layers.0.attention")
    assert attention.forward.own.gpu_busy_us == pytest.approx(30)
    assert attention.forward.total.gpu_busy_us == pytest.approx(90)
    assert attention.class_name == "Attention" and attention.calls == 1  # one launch ran its kernels
    assert node_at(p, "", "layers").calls == 0  # a container, as in eager traces
    assert node_at(p, "", "norm").forward.total.kernels == 1
    # the loss label names no module of the table: that kernel stays in its family's node
    graph = node_at(p, "", "[graph replay 0]")
    assert set(children_of(p, graph)) == {"[reduction]"}
    assert children_of(p, graph)["[reduction]"].forward.total.gpu_busy_us == pytest.approx(10)
    unknown = next(w for w in p.warnings if "kernel labels naming" in w)
    assert unknown.startswith("1 GPU work item carries kernel labels naming 1 module") and "(loss)" in unknown
    assert "kernel labels (module_fqn)" in p.source_description
    m = warning(p, REPLAYED)  # the loss kernel, 10 us of the step's 130
    assert m is not None and m.group(2) == "1"
    assert "4 more kernels are on modules, through their kernel labels" in next(
        w for w in p.warnings if m.group(0) in w
    )


def test_module_fqn_labels_without_any_module_information_make_the_tree(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    labelled_launch(b, 10, BLOCK)
    p = analyze_built(b)
    # no module table: each label names a module, its prefixes the modules that hold it
    assert {p.nodes[r].name for r in p.roots} >= {"layers", "norm", "loss"}
    wq = node_at(p, "layers", "layers.0", "layers.0.attention", "layers.0.attention.wq")
    assert wq.forward.total.gpu_busy_us == pytest.approx(60) and wq.calls == 1
    assert p.source_description.startswith("kernel labels (module_fqn)")
    assert not any("no module events in the trace" in w for w in p.warnings)
    assert warning(p, REPLAYED) is None


def test_cupti_monitor_annotation_lists_are_read(analyze_built):
    b = module_table(TraceBuilder(), MODULES)
    b.step(1, 0, 1000)
    b.scope("", "Transformer", 5, 900)
    monitor = [(name, s, d, {}) for name, s, d, _ in BLOCK[:2]]
    labelled_launch(b, 10, monitor)
    kernels = [e for e in b.events if e["cat"] == "kernel"]
    kernels[0]["args"]["annotation"] = json.dumps([{"module_fqn": "layers.0.attention.wq"}])
    kernels[1]["args"]["annotation"] = json.dumps([{"str": "phase_a"}, {"module_fqn": "norm"}])
    p = analyze_built(b)
    assert (
        node_at(
            p, "", "layers", "layers.0", "layers.0.attention", "layers.0.attention.wq"
        ).forward.total.kernels
        == 1
    )
    assert node_at(p, "", "norm").forward.total.gpu_busy_us == pytest.approx(30)
    assert "kernel labels (annotation)" in p.source_description


# -- module labels: Inductor's cudagraph labels (PR #187061) -----------------------------------------

#: a block's graph as Inductor labels it: the extern GEMM with its module, the pointwise kernel
#: fused from the work of two modules
INDUCTOR = [
    ("sm90_xmma_gemm_bf16", 0, 60, {"str": "L.layers.0.feed_forward.w1"}),
    (
        "triton_poi_fused_mul_silu_0",
        100,
        20,
        {"str": "L.layers.0.feed_forward.w1 + L.layers.0.feed_forward.act"},
    ),
    ("triton_red_fused_mean_1", 200, 10, {"str": "L"}),
    ("triton_poi_fused_copy_2", 300, 5, {"str": "phase_a"}),  # some other string label
]


def test_inductor_labels_place_kernels_and_fused_ones_on_the_common_module(analyze_built):
    b = module_table(TraceBuilder(), MODULES)
    b.step(1, 0, 1000)
    b.scope("", "Transformer", 5, 900)
    labelled_launch(b, 10, INDUCTOR)
    p = analyze_built(b)
    ff = node_at(p, "", "layers", "layers.0", "layers.0.feed_forward")
    w1 = children_of(p, ff)["w1"]
    assert w1.forward.total.gpu_busy_us == pytest.approx(60) and w1.fused.total.gpu_busy_us == 0
    # the fused kernel: on the modules' common ancestor, in its fused record too
    assert ff.forward.own.gpu_busy_us == pytest.approx(20)
    assert ff.fused is not None and ff.fused.forward.own.gpu_busy_us == pytest.approx(20)
    assert ff.fused.forward.own.kernels == 1
    root = node_at(p, "")
    assert root.forward.own.gpu_busy_us == pytest.approx(10)  # "L": the compiled root itself
    assert root.fused.forward.total.gpu_busy_us == pytest.approx(20)
    # a string label in no module's spelling is some other label: its kernel keeps its grouping
    assert children_of(p, node_at(p, "", "[graph replay 0]"))["[pointwise]"].forward.total.kernels == 1
    assert not any("kernel labels naming" in w for w in p.warnings)
    assert "kernel labels (Inductor cudagraph labels)" in p.source_description
    ops = {(o.name, o.modules) for o in ff.ops}
    assert ("triton_poi_fused_mul_silu_0", "layers.0.feed_forward.act, layers.0.feed_forward.w1") in ops


def test_inductor_labels_that_end_with_op_names_name_their_modules(analyze_built):
    b = module_table(TraceBuilder(), MODULES)
    b.step(1, 0, 1000)
    b.scope("", "Transformer", 5, 900)
    labelled_launch(
        b,
        10,
        [
            ("sm90_xmma_gemm_bf16", 0, 60, {"str": "L.layers.0.feed_forward.w1.mm"}),
            (
                "triton_poi_fused_0",
                100,
                20,
                {"str": "L.layers.0.feed_forward.act.silu + L.layers.0.feed_forward.act.mul"},
            ),
            ("triton_poi_fused_1", 200, 20, {"str": "L.layers.7.feed_forward.w1.mm"}),
        ],
    )
    p = analyze_built(b)
    ff = node_at(p, "", "layers", "layers.0", "layers.0.feed_forward")
    act = children_of(p, ff)["act"]
    assert children_of(p, ff)["w1"].forward.total.gpu_busy_us == pytest.approx(60)
    # two ops of one module: that module, not fused (no kernel is: no fused records at all)
    assert act.forward.total.gpu_busy_us == pytest.approx(20) and act.fused is None
    # a layer the model does not have is not guessed at (no landing on "layers")
    assert node_at(p, "", "layers").forward.own.gpu_busy_us == 0
    assert any("L.layers.7.feed_forward.w1.mm" in w for w in p.warnings)


def test_inductor_labels_without_a_module_table(analyze_built):
    """Without a module table, the labels' op names are told apart when every label ends with
    an ATen op's name (a revision that appends them), else each label is a module path."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    labelled_launch(
        b,
        10,
        [
            ("gemm", 0, 60, {"str": "L.model.layers.0.fc1.linear.addmm"}),
            (
                "triton_poi_fused_0",
                100,
                20,
                {"str": "L.model.layers.0.fc1.linear.silu + L.model.layers.0.add"},
            ),
        ],
    )
    p = analyze_built(b)
    linear = node_at(
        p, "model", "model.layers", "model.layers.0", "model.layers.0.fc1", "model.layers.0.fc1.linear"
    )
    assert linear.forward.total.gpu_busy_us == pytest.approx(60) and not linear.children
    layer = node_at(p, "model", "model.layers", "model.layers.0")
    assert layer.forward.own.gpu_busy_us == pytest.approx(20) and layer.fused.forward.own.kernels == 1

    b = TraceBuilder()
    b.step(1, 0, 1000)
    labelled_launch(b, 10, [("gemm", 0, 60, {"str": "L.model.norm"}), ("k", 100, 20, {"str": "L.model.fc1"})])
    p = analyze_built(b)
    assert node_at(p, "model", "model.norm").forward.total.gpu_busy_us == pytest.approx(60)


def test_inductor_labels_are_relative_to_the_module_the_graph_ran_on(analyze_built):
    """A block compiled on its own (regional compilation): Inductor's ``L`` is the block, the
    module whose scope the graph's launch is in."""
    b = module_table(TraceBuilder(), MODULES)
    b.step(1, 0, 1000)
    b.scope("", "Transformer", 5, 900)
    b.scope("layers", "ModuleList", 6, 800)
    b.scope("layers.0", "TransformerBlock", 8, 700)
    labelled_launch(b, 10, [("gemm", 0, 60, {"str": "L.feed_forward.w1"}), ("k", 100, 20, {"str": "L"})])
    p = analyze_built(b)
    block = node_at(p, "", "layers", "layers.0")
    assert children_of(p, block)["feed_forward"].forward.total.gpu_busy_us == pytest.approx(60)
    assert block.forward.own.gpu_busy_us == pytest.approx(20)


# -- passes, and what the labels leave alone -------------------------------------------------------


def test_labelled_work_keeps_the_pass_of_its_launch(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 3000)
    b.annotation("## forward ##", 5, 900)
    labelled_launch(b, 10, [("gemm", 0, 60, {"module_fqn": "layers.0"})])
    b.annotation("## backward ##", 1000, 900)
    labelled_launch(b, 1010, [("gemm_bwd", 0, 80, {"module_fqn": "layers.0"})])
    p = analyze_built(b)
    layer = node_at(p, "layers", "layers.0")  # beside the annotations, not under them
    assert layer.forward.total.gpu_busy_us == pytest.approx(60)
    assert layer.backward.total.gpu_busy_us == pytest.approx(80)
    assert "user annotations" in p.source_description and "kernel labels (module_fqn)" in p.source_description


def test_labels_on_eager_kernels_move_them_too(analyze_built):
    b = module_table(TraceBuilder(), MODULES)
    b.step(1, 0, 1000)
    b.scope("", "Transformer", 5, 900)
    b.op("aten::mm", 10, 50)
    k = b.launch(20, 100, 40, name="gemm", kind="memcpy")
    k["args"]["module_fqn"] = "norm"
    p = analyze_built(b)
    assert node_at(p, "", "norm").forward.total.gpu_busy_us == pytest.approx(40)
    assert node_at(p, "").forward.own.gpu_busy_us == 0


def test_a_tree_of_nn_module_events_does_not_take_module_labels(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.py_module("Transformer", 0, 5, 900)
    labelled_launch(b, 10, BLOCK[:1])
    p = analyze_built(b)
    assert any("without qualified names to put the labelled modules under" in w for w in p.warnings)
    assert node_at(p, "Transformer_0", "[graph replay 0]").total.gpu_busy_us == pytest.approx(60)


# -- source stacks (torch._inductor.profiler) ---------------------------------------------------------


def frame(path: str, line: int, text: str = "x") -> str:
    return f'  File "{path}", line {line}, in forward\n    {text}\n'


def py_frame(b: TraceBuilder, name: str, ts: float, dur: float, tid: int = 1) -> None:
    b.events.append(
        {
            "ph": "X",
            "cat": "python_function",
            "name": name,
            "pid": b.pid,
            "tid": tid,
            "ts": ts,
            "dur": dur,
            "args": {"Python id": len(b.events), "Python parent id": None},
        }
    )


STACK_MODULES = [
    ("", "Net"),
    ("blocks", "ModuleList"),
    ("blocks.0", "Block"),
    ("blocks.0.mlp", "MLP"),
    ("blocks.1", "Block"),
    ("blocks.1.mlp", "MLP"),
    ("head", "Head"),
]


def eager_step(b: TraceBuilder) -> None:
    """A step run eagerly with with_stack=True: each module's scope holds its forward's frame
    (``<file>(<first line>): forward``)."""
    b.step(1, 0, 1000)
    b.scope("", "Net", 5, 900)
    py_frame(b, "app/model.py(40): forward", 6, 890)
    for i, at in enumerate((10, 300)):
        b.scope(f"blocks.{i}", "Block", at, 250)
        py_frame(b, "app/model.py(20): forward", at + 1, 240)
        b.scope(f"blocks.{i}.mlp", "MLP", at + 10, 100)
        py_frame(b, "app/model.py(10): forward", at + 11, 90)
    b.scope("head", "Head", 600, 100)
    py_frame(b, "app/model.py(30): forward", 601, 90)


def compiled_step(b: TraceBuilder, stacks: list[list[str]], within: str | None = None) -> None:
    """A step whose compiled region (inside the model's scope, or ``within`` a block's)
    launches one Triton kernel per entry of ``stacks``, labelled with those stack texts."""
    b.step(2, 2000, 1000)
    b.scope("", "Net", 2005, 900)
    if within is not None:
        b.scope(within, "Block", 2006, 800)
    b.op("Torch-Compiled Region: 0/0", 2010, 700)
    for k, texts in enumerate(stacks):
        b.op(f"triton_poi_fused_{k}", 2020 + 50 * k, 20)
        kernel = b.launch(2025 + 50 * k, 2100 + 50 * k, 10, name=f"triton_poi_fused_{k}")
        kernel["args"]["stack"] = texts


ROOT = frame("/srv/venv/app/model.py", 44, "x = block(x)")
BLOCK_CODE = frame("/srv/venv/app/model.py", 22, "h = self.mlp(x)")
MLP_CODE = frame("/srv/venv/app/model.py", 12, "return self.fc(x)")
HEAD_CODE = frame("/srv/venv/app/model.py", 31, "return self.proj(x)")


def test_source_stacks_name_the_module_whose_forward_they_run(analyze_built):
    b = module_table(TraceBuilder(), STACK_MODULES)
    eager_step(b)
    compiled_step(b, [[ROOT + HEAD_CODE], [ROOT + BLOCK_CODE + MLP_CODE], [ROOT + HEAD_CODE, ROOT]])
    p = analyze_built(b, step=2)
    # the head runs once: its kernel is the head's
    assert node_at(p, "", "head").forward.total.gpu_busy_us == pytest.approx(10)
    # every block runs the MLP's code: which block's is not known, the kernel stays grouped
    groups = children_of(p, node_at(p, "", "[compiled 0/0 forward]"))
    assert groups["[pointwise]"].forward.total.gpu_busy_us == pytest.approx(20)
    assert any(w.startswith("2 GPU work items with source stacks (stack) not placed") for w in p.warnings)
    assert "kernel labels (source stacks)" in p.source_description


def test_a_stack_is_narrowed_by_the_module_the_graph_ran_in(analyze_built):
    b = module_table(TraceBuilder(), STACK_MODULES)
    eager_step(b)
    compiled_step(
        b, [[BLOCK_CODE + MLP_CODE], [BLOCK_CODE + MLP_CODE, BLOCK_CODE + HEAD_CODE]], within="blocks.1"
    )
    p = analyze_built(b, step=2)
    # the graph ran in blocks.1: its MLP is blocks.1.mlp
    mlp = node_at(p, "", "blocks", "blocks.1", "blocks.1.mlp")
    assert mlp.forward.total.gpu_busy_us == pytest.approx(10)
    assert node_at(p, "", "blocks", "blocks.0", "blocks.0.mlp").forward.total.gpu_busy_us == 0
    # the head's code is outside blocks.1: that stack says no more than the block
    assert not any(n.name == "blocks.1" and n.fused and n.fused.total.gpu_busy_us for n in p.nodes)


def test_stacks_without_python_frames_place_nothing(analyze_built):
    b = module_table(TraceBuilder(), STACK_MODULES)
    compiled_step(b, [[ROOT + HEAD_CODE]])
    p = analyze_built(b)
    assert node_at(p, "", "[compiled 0/0 forward]", "[pointwise]").forward.total.gpu_busy_us == pytest.approx(
        10
    )
    assert any("with source stacks (stack) not placed" in w for w in p.warnings)


def test_traces_without_labels_keep_their_grouping(analyze_built):
    from .test_compiled_regions import DECODE, graph_launch

    b = TraceBuilder()
    b.step(1, 0, 3000)
    b.scope("", "Model", 10, 2900)
    graph_launch(b, 100, [(n, 200 + s, d) for n, s, d in DECODE])
    p = analyze_built(b)
    assert set(children_of(p, node_at(p, "", "[graph replay 0]"))) == {"[GEMM/extern]", "[attention]"}
    assert "kernel labels" not in p.source_description


def test_labels_through_the_public_api(tmp_path):
    path = module_table(torchtitan_step(TraceBuilder()), MODULES).write(tmp_path / "t.json")
    p = traceprof.analyze(path)
    assert any(n.qualified_name == "layers.0.attention.wq" for n in p.nodes)


def test_work_the_compiled_kernel_table_placed_keeps_its_module(analyze_built):
    from .test_compiled_analysis import MODULES as TABLE_MODULES
    from .test_compiled_analysis import graph, node, site, tensor, with_tables

    fwd = graph(
        "fgpu",
        "forward",
        [site("triton", "triton_poi_fused_add_gelu_0", ["add", "gelu"], "a")],
        {
            "add": node("aten.add.Tensor", [tensor(4, 16), tensor(4, 16)], "a.lin", "Linear"),
            "gelu": node("aten.gelu.default", [tensor(4, 16)], "a.act", "GELU"),
        },
    )
    b = TraceBuilder()
    b.step(1, 0, 2000)
    b.scope("", "Net", 10, 600)
    b.op("Torch-Compiled Region: 0/0", 20, 560)
    b.op("CompiledFunction", 30, 540, seq=7)
    b.annotation("## Call CompiledFxGraph fgpu ##", 40, 500)
    b.op("triton_poi_fused_add_gelu_0", 50, 20)
    kernel = b.launch(55, 100, 30, name="triton_poi_fused_add_gelu_0")
    kernel["args"]["module_fqn"] = "b"  # the table's join is exact: the label is not needed
    p = analyze_built(with_tables(b, [fwd], TABLE_MODULES))
    assert p.find("a").forward.own.gpu_busy_us == pytest.approx(30)
    assert p.find("b").forward.total.gpu_busy_us == 0
    assert "kernel labels" not in p.source_description


def test_a_trace_annotated_by_torchs_own_annotate_trace(analyze_built):
    """The writer itself (torch.cuda._annotate_cuda_graph_trace, torch >= 2.13, pure Python): it
    moves graphed kernels to stream 7, drops annotation events of streams left without work, and
    writes each annotation's keys as args, a plain string as ``str``."""
    annotate = pytest.importorskip("torch.cuda._annotate_cuda_graph_trace").annotate_trace
    b = module_table(TraceBuilder(), MODULES)
    b.step(1, 0, 1000)
    b.scope("", "Transformer", 5, 900)
    labelled_launch(b, 10, [(n, s, d, {}) for n, s, d, _ in BLOCK[:3]])
    for k in b.events:
        if k["cat"] == "kernel":
            k["tid"] = k["args"]["stream"] = 12  # replayed on another stream than annotate_trace's
    doc = b.document()
    ids = [k["args"]["graph node id"] for k in doc["traceEvents"] if k["cat"] == "kernel"]
    annotations = {
        ids[0]: [{"module_fqn": "layers.0.attention.wq"}],
        ids[1]: [{"module_fqn": "layers.0"}, {"module_fqn": "layers.0.attention"}],  # the later wins
        ids[2]: ["L.layers.0.feed_forward.w1 + L.layers.0.feed_forward.act"],  # not a dict
    }
    assert annotate(doc, annotations) == 3
    b.events = doc["traceEvents"]
    p = analyze_built(b)
    attention = node_at(p, "", "layers", "layers.0", "layers.0.attention")
    assert attention.forward.own.gpu_busy_us == pytest.approx(30)
    assert attention.forward.total.gpu_busy_us == pytest.approx(90)
    # a non-dict annotation is written as "annotation": read as a string label
    assert node_at(p, "", "layers", "layers.0", "layers.0.feed_forward").fused.forward.own.kernels == 1


def test_a_label_too_deep_for_a_tree_is_counted_not_fatal(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    labelled_launch(
        b, 10, [("k", 0, 10, {"module_fqn": ".".join(["a"] * 400)}), ("k2", 20, 10, {"module_fqn": "x"})]
    )
    p = analyze_built(b)
    assert node_at(p, "x").forward.total.gpu_busy_us == pytest.approx(10)
    text = next(w for w in p.warnings if "too deep for a module tree" in w)
    assert text.startswith("1 GPU work item carries") and "a.a.a..." in text and len(text) < 300

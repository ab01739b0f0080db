"""Passes of traces without modules, and headers that do not contradict themselves.

A tree built from user annotations has no modules: an annotation's pass is the one its name
declares (``## forward ##``, ``## optimizer ##``, ``nccl:all_reduce``), else forward only when
autograd recorded an op inside it (docs/attribution.md "Traces without modules"). The iter
latency is above the step's wall time only with an explanation; the ``modules:`` line says what
the nodes are, and what the trace has when the requested source is absent.
"""

from __future__ import annotations

import pytest

import traceprof
from tests.tracebuilder import TraceBuilder
from traceprof.render import render
from traceprof.render.tree import summarize

from .conftest import SHARED_TRACES

SHARED = SHARED_TRACES
A100 = SHARED / "gpu_attribution" / "a100_training_rank0_of_16.json.gz"
CPU_ONLY = SHARED / "cpu_only" / "cpu_only_rank34.pt.trace.json.gz"
MI300 = SHARED / "module_tree" / "mi300_resnet_activation_checkpoint_training.json.gz"
needs = pytest.mark.skipif(not SHARED.exists(), reason="shared traces not available")


def training_step(b: TraceBuilder) -> TraceBuilder:
    """One step of annotations around a training loop: copy, forward (an op autograd recorded,
    a collective inside it), backward, optimizer, zero_grad, metrics; one kernel each."""
    b.step(1, 0, 2000)
    spans = [
        ("## copy_batch_to_gpu ##", 10, "aten::copy_", None),
        ("## forward ##", 200, "aten::mm", 1),
        ("## metrics ##", 1300, "aten::add", None),
        ("## optimizer ##", 1400, "aten::_fused_adam_", None),
        ("## zero_grad ##", 1600, "aten::zero_", None),
        ("gloo:all_reduce", 1800, "aten::sum", None),
    ]
    for name, t, op, seq in spans:
        b.annotation(name, t, 90)
        b.op(op, t + 10, 50, seq=seq)
        b.launch(t + 20, t + 100, 10)
    b.annotation("nccl:all_reduce", 250, 20)  # inside ## forward ##: forward work
    b.launch(255, 400, 5)
    b.annotation("## backward ##", 500, 700)
    b.op("autograd::engine::evaluate_function: MmBackward0", 600, 100, tid=2, seq=1, fwd_tid=1)
    b.op("MmBackward0", 601, 90, tid=2, seq=1, fwd_tid=1)
    b.launch(610, 700, 20, tid=2)
    return b


def _pass_times(profile, name):
    node = next(n for n in profile.nodes if n.name == name)
    return {p.short: profile_time(profile, node.phase(p).total) for p in traceprof.PASSES}


def profile_time(profile, t):
    return t.gpu_busy_us if profile.has_gpu else t.cpu_us


def test_optimizer_copy_and_collective_annotations_are_not_forward(analyze_built):
    p = analyze_built(training_step(TraceBuilder()))
    assert p.source == "annotations"
    for name in (
        "## copy_batch_to_gpu ##",
        "## optimizer ##",
        "## zero_grad ##",
        "gloo:all_reduce",
        "## metrics ##",
    ):
        times = _pass_times(p, name)
        assert times["fwd"] == 0 and times["other"] == pytest.approx(10), name
    forward = _pass_times(p, "## forward ##")
    assert forward["fwd"] == pytest.approx(15) and forward["other"] == 0  # its collective too
    assert _pass_times(p, "## forward ##")["bwd"] == pytest.approx(20)
    s = summarize(p)
    assert s.fwd_us == pytest.approx(15)
    assert s.iter_us == pytest.approx(p.selection.gpu_busy_us)


def test_annotations_of_an_inference_are_forward(analyze_built):
    """Without any backward in the trace, an annotation that names no pass is forward."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.annotation("encoder", 10, 100)
    b.op("aten::mm", 20, 50)
    b.launch(30, 200, 10)
    b.annotation("## copy_batch_to_gpu ##", 300, 100)
    b.op("aten::copy_", 310, 50)
    b.launch(320, 400, 10)
    p = analyze_built(b)
    assert _pass_times(p, "encoder")["fwd"] == pytest.approx(10)
    assert _pass_times(p, "## copy_batch_to_gpu ##")["fwd"] == 0


@needs
def test_forward_latency_of_an_annotated_training_trace_is_its_forward_annotation():
    p = traceprof.analyze(A100)
    forward = next(n for n in p.nodes if n.name == "## forward ##")
    s = summarize(p)
    # the GPU work launched inside ## forward ## (its backward is the backward pass's)
    launched_inside = forward.forward.total.gpu_busy_us + forward.other.total.gpu_busy_us
    assert s.fwd_us == pytest.approx(launched_inside, rel=0.05)
    for name in ("## optimizer ##", "Optimizer.step#FusedAdam.step", "## copy_batch_to_gpu ##"):
        node = next(n for n in p.nodes if n.name == name)
        assert node.forward.total.gpu_busy_us == 0, name
        assert node.other.total.gpu_busy_us > 0, name


@needs
def test_iter_latency_above_the_wall_time_is_explained():
    p = traceprof.analyze(CPU_ONLY)
    gloo = next(n for n in p.nodes if n.name == "gloo:all_reduce")
    assert gloo.forward.total.cpu_us == 0
    s = summarize(p)
    text = render(p, "tree")
    if s.iter_us > p.selection.wall_us:
        assert "iter latency above the step's wall time:" in text
        assert "threads running at the same time" in text


def test_iter_latency_within_the_wall_time_has_no_explanation(analyze_built):
    p = analyze_built(training_step(TraceBuilder()))
    assert "above the step's wall time" not in render(p, "tree")


def _modules_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("modules:"))


def test_the_header_says_annotation_nodes_are_not_modules(analyze_built):
    p = analyze_built(training_step(TraceBuilder()))
    text = render(p, "tree")
    line = _modules_line(text)
    assert "from user annotations" in line and "not modules" in line
    warning = [w for w in p.warnings if "no module events" in w]
    assert len(warning) == 1 and "annotation" in warning[0]


def test_an_absent_requested_source_names_what_the_trace_has(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.py_module("Net", 0, 10, 500)
    b.py_module("Linear", 0, 20, 100)
    b.op("aten::addmm", 30, 50)
    p = analyze_built(b, hierarchy="lightning")
    line = _modules_line(render(p, "tree"))
    assert "0 nodes" not in line and "no module or user annotation events" not in line
    assert (
        line
        == "modules:   none: the trace has no PyTorch Lightning [pl][module] scopes (--hierarchy lightning)"
    )
    warning = [w for w in p.warnings if "Lightning" in w]
    assert len(warning) == 1
    assert "it has 2 nodes from python_function nn.Module events" in warning[0]
    assert "--hierarchy nn.Module" in warning[0]


def test_no_source_at_all_is_said_once(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.op("aten::mm", 10, 100)
    p = analyze_built(b)
    assert (
        _modules_line(render(p, "tree"))
        == "modules:   none: no module or user annotation events in the trace"
    )
    assert not [w for w in analyze_built(b, hierarchy="none").warnings if "the trace has no" in w]


@needs
def test_requested_lightning_on_a_module_trace_names_its_modules():
    p = traceprof.analyze(MI300, hierarchy="lightning")
    warning = [w for w in p.warnings if "Lightning" in w]
    assert "it has 73 nodes from python_function nn.Module events" in warning[0]


def test_gpu_work_launched_before_the_trace_has_one_name_in_the_tree_and_the_ops():
    """The tree's group and the ops rows name work launched before the trace alike: the ops of
    the unattributed bucket hold no ``(launch not in trace)`` row for it."""
    from traceprof.analysis.unattributed import LAUNCH_NOT_IN_TRACE, LAUNCHED_BEFORE_TRACE

    p = traceprof.analyze(A100)
    bucket = p.unattributed
    assert bucket is not None
    groups = {p.nodes[c].name: p.nodes[c] for c in bucket.children}
    assert LAUNCHED_BEFORE_TRACE in groups
    group = groups[LAUNCHED_BEFORE_TRACE]
    op_names = {op.name for op in group.ops if op.kind.value == "op"}
    assert op_names == {LAUNCHED_BEFORE_TRACE}
    assert LAUNCH_NOT_IN_TRACE not in {op.name for n in p.nodes for op in n.ops}


def test_a_callbacks_headline_names_modules_apart_from_the_rest(analyze_built):
    """A trace without module events: its annotations are no modules, so the headline has no
    top module; the optimizer step and the data loading are named apart, outside the modules."""
    from traceprof.integrations.window import headline, top_modules, top_outside

    b = training_step(TraceBuilder())
    b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1950, 40)
    b.op("aten::stack", 1955, 30)
    b.launch(1960, 1960, 5)  # its copy to the device
    p = analyze_built(b)
    assert p.source == "annotations"
    assert top_modules(p, 5) == ()
    outside = [m.name for m in top_outside(p, 10)]
    assert {"## optimizer ##", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"} <= set(outside)
    line = headline(p, "t.json").message()
    assert "top modules" not in line and "; outside the modules: " in line

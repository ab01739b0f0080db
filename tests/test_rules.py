"""One rule per test, on tiny traces built in code (tests/tracebuilder.py)."""

from __future__ import annotations

import gzip
import json
import re

import pytest

import traceprof
from traceprof.errors import OptionError
from traceprof.result.model import NodeKind

from .tracebuilder import TraceBuilder


def forward_model(b: TraceBuilder, t0=0.0, tid=1, k_fc=30, k_act=10, step=1):
    """Net -> fc (Linear, one addmm kernel), act (ReLU, one kernel), inside ProfilerStep#step."""
    b.step(step, t0, 1000, tid)
    b.scope("", "Net", t0 + 10, 500, tid)
    b.scope("fc", "Linear", t0 + 20, 100, tid)
    b.op("aten::addmm", t0 + 30, 50, tid, seq=step * 10 + 1)
    b.launch(t0 + 40, t0 + 200, k_fc, tid)
    b.scope("act", "ReLU", t0 + 150, 50, tid)
    b.op("aten::relu", t0 + 160, 20, tid, seq=step * 10 + 2)
    b.launch(t0 + 165, t0 + 300, k_act, tid)
    return b


def test_kernel_time_goes_to_the_innermost_module_of_its_launch(analyze_built):
    p = analyze_built(forward_model(TraceBuilder()))
    assert p.source == "traceprof"
    fc, act, net = p.find("fc"), p.find("act"), p.find("")
    assert fc.forward.own.gpu_busy_us == pytest.approx(30)
    assert act.forward.own.gpu_busy_us == pytest.approx(10)
    assert net.forward.total.gpu_busy_us == pytest.approx(40)
    assert net.forward.own.gpu_busy_us == 0
    assert (fc.total.kernels, act.total.kernels, net.total.kernels) == (1, 1, 2)
    assert fc.backward.total.gpu_busy_us == 0
    assert fc.name == "fc" and fc.class_name == "Linear" and net.class_name == "Net"
    assert p.selection.gpu_busy_us == pytest.approx(40)
    assert p.unattributed.total.gpu_busy_us == 0


def test_concurrent_kernels_share_busy_time_so_it_adds_up_to_the_union(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.scope("", "Net", 10, 500)
    b.scope("a", "A", 20, 50)
    b.op("aten::mm", 21, 10, seq=1)
    b.launch(22, 100, 40, stream=7)  # [100, 140]
    b.scope("b", "B", 80, 50)
    b.op("aten::mm", 81, 10, seq=2)
    b.launch(82, 120, 40, stream=20)  # [120, 160], overlaps 20 us
    p = analyze_built(b)
    assert p.find("a").forward.own.gpu_busy_us == pytest.approx(30)
    assert p.find("b").forward.own.gpu_busy_us == pytest.approx(30)
    assert p.selection.gpu_busy_us == pytest.approx(60)  # union of [100,140] and [120,160]
    assert p.selection.gpu_work_us == pytest.approx(80)  # plain sum of durations
    assert p.find("a").forward.own.gpu_work_us == pytest.approx(40)


def backward_model(b: TraceBuilder, recompute=False, accumulate=False):
    forward_model(b)
    # backward on its own thread (tid 2), inside the step's time range
    b.op("autograd::engine::evaluate_function: AddmmBackward0", 600, 100, tid=2, seq=11, fwd_tid=1)
    b.op("AddmmBackward0", 601, 90, tid=2, seq=11, fwd_tid=1)
    b.op("aten::mm", 610, 20, tid=2)  # no sequence number: goes with its parent
    b.launch(612, 700, 25, tid=2)
    if recompute:
        # activation checkpointing: the module re-runs inside the backward node
        b.scope("act", "ReLU", 640, 30, tid=2)
        b.op("aten::relu", 645, 10, tid=2, seq=99)
        b.launch(646, 730, 5, tid=2)
    if accumulate:
        b.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 750, 40, tid=2)
        b.op("aten::add_", 755, 10, tid=2)
        b.launch(756, 800, 7, tid=2)
    return b


def test_backward_goes_to_the_module_of_the_forward_op_with_the_same_sequence_number(analyze_built):
    p = analyze_built(backward_model(TraceBuilder()))
    fc = p.find("fc")
    assert fc.backward.own.gpu_busy_us == pytest.approx(25)
    assert fc.forward.own.gpu_busy_us == pytest.approx(30)
    assert p.find("act").backward.total.gpu_busy_us == 0
    assert fc.backward.own.cpu_us > 0  # CPU time of the backward ops too
    assert p.stats.backward_nodes == 2 and p.stats.backward_nodes_linked == 2


def test_modules_rerun_inside_backward_are_joined_to_their_forward_node(analyze_built):
    p = analyze_built(backward_model(TraceBuilder(), recompute=True))
    act = p.find("act")
    assert act.backward.own.gpu_busy_us == pytest.approx(5)
    assert act.calls == 1  # a re-run is not a forward call
    assert p.find("fc").backward.own.gpu_busy_us == pytest.approx(25)
    assert p.module_nodes == 3  # no second "act" node


def test_backward_work_without_sequence_number_is_backward_and_unattributed(analyze_built):
    p = analyze_built(backward_model(TraceBuilder(), accumulate=True))
    bucket = p.unattributed
    assert bucket.backward.total.gpu_busy_us == pytest.approx(7)
    assert bucket.forward.total.gpu_busy_us == 0
    (group,) = [p.nodes[c] for c in bucket.children if p.nodes[c].total.gpu_busy_us > 0]
    assert "AccumulateGrad" in group.name


def test_external_id_joins_gpu_work_whose_launch_is_missing(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.scope("fc", "Linear", 10, 100)
    op = b.op("aten::mm", 20, 50, seq=1)
    b.launch(30, 200, 12, with_runtime=False, external_id=op["args"]["External id"])
    b.launch(300, 400, 8, with_runtime=False)  # no launch, no External id
    p = analyze_built(b)
    assert p.find("fc").forward.own.gpu_busy_us == pytest.approx(12)
    groups = {p.nodes[c].name: p.nodes[c] for c in p.unattributed.children}
    assert groups["(launch not in trace)"].total.gpu_busy_us == pytest.approx(8)
    assert p.stats.gpu_work_without_launch == 1


def test_numbers_are_the_mean_over_complete_steps_and_step_selects_one(analyze_built):
    b = TraceBuilder()
    forward_model(b, t0=0, k_fc=30, step=1)
    forward_model(b, t0=2000, k_fc=50, step=2)
    p = analyze_built(b)
    assert p.selection.numbers == (1, 2)
    assert p.find("fc").forward.total.gpu_busy_us == pytest.approx(40)
    assert p.find("fc").calls == 1
    one = analyze_built(b, step=2)
    assert one.find("fc").forward.total.gpu_busy_us == pytest.approx(50)
    with pytest.raises(OptionError, match="step 7 is not in the trace"):
        traceprof.analyze(b.write(b_path(one)), step=7)


def b_path(profile):
    return profile.metadata.path


def test_a_step_with_a_launch_whose_kernel_is_missing_is_left_out(analyze_built):
    b = TraceBuilder()
    forward_model(b, t0=0, k_fc=30, step=1)
    forward_model(b, t0=2000, k_fc=50, step=2)
    b.events.append(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 100,
            "tid": 1,
            "ts": 2900,
            "dur": 2,
            "args": {"correlation": 99999},
        }
    )
    p = analyze_built(b)
    assert p.selection.numbers == (1,)
    assert p.selection.incomplete == (2,)
    assert p.find("fc").forward.total.gpu_busy_us == pytest.approx(30)


def test_2021_spellings_give_the_same_profile_as_modern_ones(analyze_built):
    modern = analyze_built(backward_model(TraceBuilder()))
    legacy = analyze_built(backward_model(TraceBuilder(era="2021")))
    for name in ("", "fc", "act"):
        a, b = modern.find(name), legacy.find(name)
        assert a.forward.total == b.forward.total
        assert a.backward.total.gpu_busy_us == b.backward.total.gpu_busy_us


def test_begin_end_pairs_float_timestamps_and_base_time(analyze_built, tmp_path):
    b = forward_model(TraceBuilder())
    ref = analyze_built(b)
    # the same trace with B/E pairs for the scopes and a base time with relative float ts
    b2 = forward_model(TraceBuilder())
    events = []
    for ev in b2.events:
        if ev["name"].startswith("[traceprof"):
            events.append({**ev, "ph": "B", "ts": ev["ts"] + 0.125})
            events.append({"ph": "E", "pid": ev["pid"], "tid": ev["tid"], "ts": ev["ts"] + 0.125 + ev["dur"]})
        else:
            events.append({**ev, "ts": ev["ts"] + 0.125})
    b2.events = events
    b2.top["baseTimeNanoseconds"] = 1_700_000_000_000_000_000
    p = analyze_built(b2)
    for name in ("", "fc", "act"):
        assert p.find(name).forward.total.gpu_busy_us == pytest.approx(
            ref.find(name).forward.total.gpu_busy_us
        )
    assert p.metadata.base_time_ns == 1_700_000_000_000_000_000


def test_repeated_calls_share_a_node_and_recursion_nests(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.scope("", "Net", 1, 900)
    for t in (10, 100):  # the same block called twice
        b.scope("block", "Block", t, 50)
        b.op("aten::mm", t + 1, 10, seq=t)
        b.launch(t + 2, t + 500, 4)
    b.scope("rec", "Rec", 300, 100)
    b.scope("rec", "Rec", 310, 50)  # calls itself
    b.op("aten::add", 311, 5, seq=400)
    b.launch(312, 700, 6)
    p = analyze_built(b)
    block = p.find("block")
    assert block.calls == 2
    assert block.forward.total.gpu_busy_us == pytest.approx(8)
    recs = [n for n in p.nodes if n.qualified_name == "rec"]
    assert [n.depth for n in recs] == [1, 2]
    assert recs[1].parent == recs[0].id
    assert recs[1].forward.own.gpu_busy_us == pytest.approx(6)


def test_root_scope_with_or_without_trailing_space(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.annotation("[traceprof:1]Net:", 1, 50)
    p = analyze_built(b)
    root = p.nodes[p.roots[0]]
    assert root.class_name == "Net" and root.qualified_name == "" and root.name == "Net"


def test_python_function_modules_and_lightning_scopes(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.py_module("Net", 0, 10, 500)
    b.py_module("Linear", 3, 20, 100)
    b.op("aten::mm", 30, 10, seq=1)
    b.launch(31, 200, 9)
    p = analyze_built(b)
    assert p.source == "nn.Module"
    lin = p.nodes[p.nodes[p.roots[0]].children[0]]
    assert (lin.name, lin.class_name, lin.qualified_name) == ("Linear_3", "Linear", "Net_0.Linear_3")
    assert lin.forward.total.gpu_busy_us == pytest.approx(9)

    pl = TraceBuilder()
    pl.step(1, 0, 1000)
    pl.op("[pl][module]my.pkg.Net: ", 10, 500)
    pl.op("[pl][module]torch.nn.modules.linear.Linear: layer.0", 20, 100)
    pl.op("aten::mm", 30, 10, seq=1)
    pl.launch(31, 200, 9)
    p = analyze_built(pl)
    assert p.source == "lightning"
    layer = p.find("layer.0")
    assert (layer.name, layer.class_name) == ("0", "Linear")
    assert layer.forward.total.gpu_busy_us == pytest.approx(9)


def test_traceprof_scopes_win_over_python_function_modules(analyze_built):
    b = forward_model(TraceBuilder())
    b.py_module("Net", 0, 11, 400)
    p = analyze_built(b)
    assert p.source == "traceprof"


def test_without_modules_annotations_form_the_tree_and_ops_the_bucket(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.annotation("## forward ##", 10, 100)
    b.op("aten::mm", 20, 10)
    b.launch(21, 200, 9)
    b.op("aten::copy_", 300, 10)
    b.launch(301, 400, 3)
    p = analyze_built(b)
    assert p.source == "annotations"
    assert p.find("## forward ##").forward.total.gpu_busy_us == pytest.approx(9)
    groups = {p.nodes[c].name: p.nodes[c] for c in p.unattributed.children}
    assert groups["aten::copy_"].total.gpu_busy_us == pytest.approx(3)
    none = analyze_built(b, hierarchy="nn.Module")
    assert none.module_nodes == 0
    assert none.unattributed.total.gpu_busy_us == pytest.approx(12)


def test_partially_overlapping_slices_are_repaired(analyze_built):
    """A Python frame that opens before the step and closes inside it (seen in real traces)
    must not steal the step's children."""
    b = TraceBuilder()
    b.events.append(
        {
            "ph": "X",
            "cat": "python_function",
            "name": "<built-in method _record_function_enter_new>",
            "pid": 100,
            "tid": 1,
            "ts": -5,
            "dur": 20,
            "args": {},
        }
    )
    forward_model(b)
    p = analyze_built(b)
    assert p.stats.nesting_conflicts == 1
    assert p.find("fc").forward.own.gpu_busy_us == pytest.approx(30)
    assert p.find("").calls == 1


def test_cpu_only_trace_gives_a_cpu_time_tree(analyze_built):
    b = TraceBuilder()
    b.top["deviceProperties"] = []
    b.step(1, 0, 1000)
    b.scope("", "Net", 10, 500)
    b.scope("fc", "Linear", 20, 100)
    b.op("aten::addmm", 30, 60, seq=1)
    b.op("aten::mm", 40, 20)
    p = analyze_built(b)
    fc, net = p.find("fc"), p.find("")
    assert not p.has_gpu
    assert fc.forward.total.cpu_us == pytest.approx(100)
    assert fc.forward.own.cpu_us == pytest.approx(100)  # the scope's and its ops' exclusive time
    assert net.forward.own.cpu_us == pytest.approx(400)
    assert p.share_of_step(net) == pytest.approx(500 / p.selection.cpu_us)


def test_transforms_keep_the_invariants(analyze_built):
    p = analyze_built(backward_model(TraceBuilder(), recompute=True, accumulate=True))
    for q in (
        traceprof.limit_depth(p, 0),
        traceprof.limit_depth(p, 1),
        traceprof.top_children(p, 1),
        traceprof.sort_children(p, "gpu"),
        traceprof.sort_children(p, "name"),
    ):
        q.self_check()
    shallow = traceprof.limit_depth(p, 0)
    root = shallow.nodes[shallow.roots[0]]
    assert root.children == () and root.forward.own == root.forward.total
    top = traceprof.top_children(p, 1)
    kids = [top.nodes[c] for c in top.nodes[top.roots[0]].children]
    assert [k.name for k in kids] == ["fc", "(1 more)"]
    assert kids[1].kind is NodeKind.OTHERS
    by_gpu = traceprof.sort_children(p, "gpu")
    assert [by_gpu.nodes[c].name for c in by_gpu.nodes[by_gpu.roots[0]].children] == ["fc", "act"]


def test_gzip_and_plain_files_read_alike(tmp_path):
    b = forward_model(TraceBuilder())
    plain = traceprof.analyze(b.write(tmp_path / "a.json"))
    packed = traceprof.analyze(b.write(tmp_path / "a.json.gz", gz=True))
    assert plain.find("fc").forward.total == packed.find("fc").forward.total


def test_module_table_joins_params_and_shapes(analyze_built):
    import base64

    b = forward_model(TraceBuilder())
    table = {
        "format": "traceprof.modules",
        "version": 1,
        "rank": 0,
        "world_size": 1,
        "modules": [
            {
                "name": "",
                "class": "Net",
                "params": 0,
                "params_total": 110,
                "trainable_total": 110,
                "frozen_total": 0,
                "buffers_total": 0,
                "extra_repr": "",
                "inputs": [{"shape": [4, 10], "dtype": "float32"}],
                "outputs": {"shape": [4, 10], "dtype": "float32"},
            },
            {
                "name": "fc",
                "class": "Linear",
                "params": 110,
                "params_total": 110,
                "trainable_total": 110,
                "frozen_total": 0,
                "buffers_total": 0,
                "extra_repr": "in_features=10, out_features=10, bias=True",
                "inputs": [{"shape": [4, 10], "dtype": "float32"}],
                "outputs": {"shape": [4, 10], "dtype": "float32"},
            },
        ],
    }
    b.top["traceprof"] = base64.b64encode(json.dumps(table).encode()).decode()
    p = analyze_built(b)
    assert p.find("fc").info.params_total == 110
    assert p.find("fc").info.inputs == [{"shape": [4, 10], "dtype": "float32"}]
    assert p.find("act").info is None
    assert p.metadata.rank == 0 and p.metadata.world_size == 1


def test_unreadable_module_table_is_a_warning_not_an_error(analyze_built):
    b = forward_model(TraceBuilder())
    b.top["traceprof"] = "not base64 json!"
    p = analyze_built(b)
    assert any("module table" in w for w in p.warnings)


def test_trace_written_gzip_with_invalid_utf8_name(tmp_path):
    b = forward_model(TraceBuilder())
    raw = json.dumps(b.document()).replace("aten::relu", "aten::rel\udcff").encode("utf-8", "surrogateescape")
    path = tmp_path / "bad.json.gz"
    path.write_bytes(gzip.compress(raw))
    p = traceprof.analyze(path)
    p.self_check()
    assert any("UTF-8" in w for w in p.warnings)


# ---- reports that mislead: one test per class -------------------------------------------------

F = "float"


def training_step(b: TraceBuilder) -> TraceBuilder:
    """backward_model plus a loss outside the modules (autograd records it: forward), the
    optimizer step and zero_grad (neither forward nor backward), with time between the ops."""
    backward_model(b, accumulate=True)
    b.op("aten::cross_entropy_loss", 515, 20, seq=50)  # outside Net (10..510), in the step
    b.launch(520, 320, 6)
    b.op("autograd::engine::evaluate_function: NllLossBackward0", 560, 30, tid=2, seq=50, fwd_tid=1)
    b.op("NllLossBackward0", 561, 20, tid=2, seq=50, fwd_tid=1)
    b.annotation("Optimizer.step#SGD.step", 850, 60)
    b.op("aten::_foreach_add_", 855, 40)
    b.launch(860, 900, 12)
    b.annotation("Optimizer.zero_grad#SGD.zero_grad", 920, 20)
    b.op("aten::zero_", 925, 10)
    b.launch(926, 950, 3)
    return b


def test_work_neither_forward_nor_backward_is_the_other_pass(analyze_built):
    from traceprof.render import render
    from traceprof.render.tree import summarize
    from traceprof.result.model import PASSES, Pass

    p = analyze_built(training_step(TraceBuilder()))
    group = {p.nodes[c].name: p.nodes[c] for c in p.unattributed.children}
    opt, zero = group["Optimizer.step#SGD.step"], group["Optimizer.zero_grad#SGD.zero_grad"]
    assert opt.other.total.gpu_busy_us == pytest.approx(12) and opt.forward.total.gpu_busy_us == 0
    assert zero.other.total.gpu_busy_us == pytest.approx(3) and zero.forward.total.gpu_busy_us == 0
    loss = group["aten::cross_entropy_loss"]  # an op autograd recorded: forward
    assert loss.forward.total.gpu_busy_us == pytest.approx(6) and loss.other.total.gpu_busy_us == 0
    gaps = group["(step, between ops)"]
    assert gaps.other.total.cpu_us > 0 and gaps.forward.total.cpu_us == 0
    for name in ("", "fc", "act"):  # a module's work is forward or backward
        assert p.find(name).other.total == p.find(name).other.own == traceprof.Times()
    assert p.find("fc").total == sum((p.find("fc").phase(x).total for x in PASSES), traceprof.Times())
    assert p.optimizer_step.other.gpu_busy_us == pytest.approx(12)

    s = summarize(p)  # DeepSpeed's step latency is the optimizer; other the rest of that pass
    assert (s.step_us, s.other_us) == (pytest.approx(12), pytest.approx(3))
    assert s.fwd_us == pytest.approx(40 + 6) and s.bwd_us == pytest.approx(25 + 7)
    assert s.iter_us == pytest.approx(p.selection.gpu_busy_us)
    tree = render(p, "tree")
    assert "(Optimizer.step#SGD.step)(fwd 0, bwd 0, other 12.0 us, 12.0 us" in tree
    assert re.search(r"^other latency \(neither fwd, bwd nor step\):\s+3\.0 us$", tree, re.M)
    table = render(p, "table")
    assert re.search(r"Fwd GPU\s+Bwd GPU\s+Other GPU", table)
    doc = json.loads(render(p, "json"))
    node = next(n for n in doc["nodes"] if n["name"] == "Optimizer.step#SGD.step")
    assert node["other_total_gpu_busy_us"] == pytest.approx(12) and node["forward_total_gpu_busy_us"] == 0
    header = render(p, "csv").splitlines()[0].split(",")
    assert {f"{x.value}_total_gpu_busy_us" for x in Pass} <= set(header)


def cpu_only_step(b: TraceBuilder, t0=0.0) -> TraceBuilder:
    """A CPU-only step of 1000 us with 300 us in ops: 700 us between them."""
    b.step(1, t0, 1000)
    b.scope("", "Net", t0 + 100, 200)
    b.op("aten::mm", t0 + 110, 150, seq=1)
    b.op("aten::add", t0 + 500, 100)
    return b


def test_cpu_time_of_a_cpu_only_trace_leaves_out_the_time_between_ops(analyze_built):
    from traceprof.render import render

    p = analyze_built(cpu_only_step(TraceBuilder()))
    assert not p.has_gpu
    sel = p.selection
    assert sel.wall_us == pytest.approx(1000)
    assert sel.cpu_in_ops_us == pytest.approx(300)  # the union of the top-level slices
    assert sel.cpu_between_ops_us == pytest.approx(700)
    assert sel.cpu_us == pytest.approx(1000)  # what the tree adds up to, gaps included
    gaps = next(p.nodes[c] for c in p.unattributed.children if p.nodes[c].name == "(step, between ops)")
    assert gaps.other.total.cpu_us == pytest.approx(700)
    line = next(x for x in render(p, "tree").splitlines() if x.startswith("per step:"))
    assert line == "per step:  wall 1.00 ms, CPU 300.0 us in ops + 700.0 us between ops"
    doc = json.loads(render(p, "json"))
    assert doc["steps"]["cpu_in_ops_us"] == pytest.approx(300)
    assert doc["steps"]["cpu_between_ops_us"] == pytest.approx(700)


def launched_early(b: TraceBuilder) -> TraceBuilder:
    """A kernel launched before the trace began (its correlation id is below every launch in the
    trace) and one whose launch is missing for no such reason, around forward_model."""
    b.launch(0, 50, 20, with_runtime=False)  # correlation 1001, before the first launch (1002)
    forward_model(b)
    b.launch(0, 400, 5, with_runtime=False)  # correlation 1004: a launch missing from the trace
    return b


def test_gpu_work_without_a_launch_is_named_and_warned(analyze_built):
    from traceprof.render import render

    p = analyze_built(launched_early(TraceBuilder()))
    group = {p.nodes[c].name: p.nodes[c] for c in p.unattributed.children}
    before, missing = group["(launched before the trace)"], group["(launch not in trace)"]
    assert before.other.total.gpu_busy_us == pytest.approx(20)
    assert missing.other.total.gpu_busy_us == pytest.approx(5)
    # counted in the step's GPU time, in the header as in the tree
    assert p.selection.gpu_busy_us == pytest.approx(30 + 10 + 20 + 5)
    assert p.selection.gpu_launched_before_trace_us == pytest.approx(20)
    assert p.selection.gpu_launch_missing_us == pytest.approx(5)
    early = [w for w in p.warnings if "launched before the trace began" in w]
    lost = [w for w in p.warnings if "has no launch in the trace" in w]
    assert len(early) == len(lost) == 1
    assert early[0].startswith("30.8% of the step's GPU busy time (20.0 us per step; 1 of the 4")
    assert "(not in any module)/(launched before the trace)" in early[0]
    assert lost[0].startswith("7.7% of the step's GPU busy time")
    # every format carries the warnings
    for fmt in ("tree", "table"):
        assert f"warning:   {early[0]}" in render(p, fmt)
    assert early[0] in json.loads(render(p, "json"))["warnings"]
    assert early[0].replace("<", "\\u003c") in render(p, "html")


def test_gpu_work_without_a_launch_below_one_percent_is_no_warning(analyze_built):
    b = TraceBuilder()
    b.launch(0, 50, 0.2, with_runtime=False)
    forward_model(b, k_fc=3000)
    p = analyze_built(b)
    assert p.selection.gpu_launched_before_trace_us == pytest.approx(0.2)
    assert not [w for w in p.warnings if "launch" in w]


def test_sort_by_time_on_a_cpu_only_trace_sorts_by_cpu_time(analyze_built):
    from traceprof.result.transforms import sort_children

    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.scope("", "Net", 10, 200)
    b.scope("a", "A", 20, 20)  # forward 20 us, backward 100 us
    b.op("aten::mm", 21, 18, seq=1)
    b.scope("b", "B", 50, 70)  # forward 70 us, backward 10 us
    b.op("aten::mm", 51, 68, seq=2)
    b.op("autograd::engine::evaluate_function: MmBackward0", 300, 100, tid=2, seq=1, fwd_tid=1)
    b.op("autograd::engine::evaluate_function: MmBackward0", 410, 10, tid=2, seq=2, fwd_tid=1)
    p = analyze_built(b)
    assert not p.has_gpu
    order = lambda q: [q.nodes[c].name for c in q.nodes[q.roots[0]].children]  # noqa: E731
    assert order(p) == ["a", "b"]
    for key, want in (("fwd", ["b", "a"]), ("bwd", ["a", "b"]), ("gpu", ["a", "b"])):
        sorted_p = sort_children(p, key)
        sorted_p.self_check()
        assert order(sorted_p) == want, key
    assert order(traceprof.analyze(b.write(p.metadata.path), sort="fwd")) == ["b", "a"]


def test_a_trace_without_modules_says_how_to_get_them(analyze_built):
    from traceprof.render import render

    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.op("aten::mm", 10, 100)
    b.launch(20, 200, 30)
    p = analyze_built(b)
    assert p.module_nodes == 0
    hint = [w for w in p.warnings if "no module events" in w]
    assert len(hint) == 1 and "with_stack=True" in hint[0] and "traceprof.capture" in hint[0]
    assert f"warning:   {hint[0]}" in render(p, "tree")
    forced = analyze_built(b, hierarchy="annotations")  # the user chose: no hint
    assert not [w for w in forced.warnings if "no module events" in w]
    assert not [w for w in analyze_built(forward_model(TraceBuilder())).warnings if "no module events" in w]


def test_an_unknown_step_names_the_file(tmp_path):
    path = forward_model(TraceBuilder()).write(tmp_path / "t.json")
    with pytest.raises(OptionError) as err:
        traceprof.analyze(path, step=7)
    assert err.value.message == f"{path}: step 7 is not in the trace (steps in the trace: 1)"


def test_peak_tflops_gives_mfu_on_a_cpu_only_trace(analyze_built):
    from traceprof.render import render

    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.scope("", "Net", 10, 500)
    b.shaped_op("aten::mm", 20, 100, [[64, 32], [32, 16]], [F, F], ["", ""])  # 65536 FLOPs
    p = analyze_built(b)
    assert p.throughput(p.selection).mfu is None  # no peak known for a CPU
    given = analyze_built(b, peak_tflops=1e-3)  # 1 GFLOP/s
    rates = given.throughput(given.selection)  # over the CPU time in ops: Net's 500 us
    assert given.selection.cpu_in_ops_us == pytest.approx(500)
    assert rates.flop_per_s == pytest.approx(65536 / 500e-6)
    assert rates.mfu == pytest.approx(65536 / 500e-6 / 1e9)
    assert given.flops.peak.source == "given (--peak-tflops)"
    assert given.throughput(given.find("").total).mfu == pytest.approx(rates.mfu)
    assert re.search(
        r"^achieved: .* MFU [\d.]+% of the CPU fp32 peak .* \(--peak-tflops\)", render(given, "tree"), re.M
    )

"""Lifetimes of allocations, activations and what holds the memory: one rule per test on tiny
traces built in code (the live models are in test_activation_memory.py)."""

from __future__ import annotations

import pytest

from traceprof.analysis.lifetimes import lifetimes
from traceprof.read.build import load_trace

from .conftest import SAMPLE_TRACES, SHARED_TRACES
from .test_rules import forward_model
from .tracebuilder import TraceBuilder

BASE = 10_000  # bytes allocated before the trace, in the allocator's total


class Allocator:
    """[memory] events with the allocator's running total, and addresses."""

    def __init__(self, b: TraceBuilder, base: int = BASE) -> None:
        self.b, self.total = b, base

    def alloc(self, ts, nbytes, addr, tid=1):
        self.total += nbytes
        self.b.memory(ts, nbytes, total=self.total, addr=addr, tid=tid)

    def free(self, ts, nbytes, addr, tid=1):
        self.total -= nbytes
        self.b.memory(ts, -nbytes, total=self.total, addr=addr, tid=tid)


def use(profile, name):
    node = profile.find(name)
    return profile.memory_of(node)


def training_step(b: TraceBuilder, params: int | None = None, extra: int = 0) -> TraceBuilder:
    """fc and act's forward (step 1: 0-1000), fc's backward at 600-640 on the autograd thread,
    an SGD step at 700-800; blocks:

    - 0x9000 2048 B allocated before the trace, freed at 5;
    - 0x1000 4096 B fc's forward, freed in the backward: an activation of fc;
    - 0x2000 1024 B fc's forward, freed in fc: a temporary;
    - 0x3000 512 B act's forward, never freed: an activation of act;
    - 0x4000 256 B the backward's, alive after it: a gradient;
    - 0x5000 512 B the backward's, freed in it: a temporary;
    - 0x6000 8192 B the optimizer's, alive after the step: optimizer state;
    - 0x7000 4096 B the optimizer's, freed in it: a temporary (the peak, 21,008 B, is its
      allocation).
    """
    forward_model(b)
    b.op("AddmmBackward0", 600, 40, tid=2, seq=11, fwd_tid=1)
    b.annotation("Optimizer.step#SGD.step", 700, 100)
    m = Allocator(b)
    m.free(5, 2048, 0x9000)
    m.alloc(35, 4096, 0x1000)
    m.alloc(36, 1024, 0x2000)
    if extra:  # a block of fc's forward never freed
        m.alloc(40, extra, 0xBEEF)
    m.free(100, 1024, 0x2000)
    m.alloc(170, 512, 0x3000)
    m.free(620, 4096, 0x1000, tid=2)
    m.alloc(625, 256, 0x4000, tid=2)
    m.alloc(630, 512, 0x5000, tid=2)
    m.free(635, 512, 0x5000, tid=2)
    m.alloc(710, 8192, 0x6000)
    m.alloc(720, 4096, 0x7000)
    m.free(730, 4096, 0x7000)
    if params is not None:
        b.top["traceprof"] = {
            "format": "traceprof.modules",
            "version": 1,
            "modules": [
                {"name": "", "class": "Net", "param_bytes_total": params},
                {"name": "fc", "class": "Linear", "param_bytes_total": params},
                {"name": "act", "class": "ReLU", "param_bytes_total": 0},
            ],
        }
    return b


def test_allocations_pair_with_the_frees_of_their_block(tmp_path):
    b = training_step(TraceBuilder())
    life = lifetimes(load_trace(b.write(tmp_path / "t.json"), cache=False))
    assert life.has_addresses
    assert len(life) == 8  # 7 allocations, 1 free of a block allocated before the trace
    assert life.allocated_before == 1
    assert life.alive_at_end == 3  # act's activation, the gradient, the optimizer state
    assert (life.free_missing, life.size_mismatch, life.without_address) == (0, 0, 0)
    by_size = {int(n): (float(s), float(e)) for n, s, e in zip(life.nbytes, life.start, life.end)}
    assert by_size[4096 + 0] in ((35.0, 620.0), (720.0, 730.0))
    assert by_size[2048] == (float("-inf"), 5.0)
    assert by_size[512] in ((170.0, float("inf")), (630.0, 635.0))
    assert by_size[8192] == (710.0, float("inf"))


def test_a_lost_free_and_a_free_of_another_size_are_repaired_and_counted(analyze_built, tmp_path):
    b = forward_model(TraceBuilder())
    b.memory(31, 100, total=100, addr=0xA)
    b.memory(32, 100, total=200, addr=0xA)  # the same block again: its free was lost
    b.memory(33, -60, total=140, addr=0xA)  # freed with another size
    b.memory(34, 50, total=190)  # no address
    life = lifetimes(load_trace(b.write(tmp_path / "t.json"), cache=False))
    assert (life.free_missing, life.size_mismatch, life.without_address) == (1, 1, 1)
    assert sorted(zip(life.start.tolist(), life.end.tolist())) == [(31.0, 32.0), (32.0, 33.0)]
    assert sorted(life.nbytes.tolist()) == [100, 100]  # the allocation's size kept
    warnings = " ".join(analyze_built(b).warnings)
    assert "1 allocation of a block allocated again without a free" in warnings
    assert "1 free of another size than its block's allocation" in warnings
    assert "1 [memory] event without an address left out of the lifetimes" in warnings


def test_activations_are_the_forward_blocks_still_allocated_when_the_backward_begins(analyze_built):
    p = analyze_built(training_step(TraceBuilder()))
    assert use(p, "fc").own_activation_bytes == 4096  # the temporary freed in fc is not
    assert use(p, "act").own_activation_bytes == 512
    assert use(p, "").own_activation_bytes == 0
    assert use(p, "").activation_bytes == 4096 + 512  # the subtree's
    assert p.memory_summary.activation_bytes == 4096 + 512
    assert p.memory_summary.lifetimes == 8
    assert p.memory_summary.allocated_before_trace == 1 and p.memory_summary.alive_at_trace_end == 3


def test_each_backward_pass_of_a_step_begins_anew(analyze_built):
    """Gradient accumulation: two forwards and two backwards in one step; each block of a
    forward counts when the backward that follows it begins."""
    b = TraceBuilder()
    b.step(1, 0, 3000)
    b.scope("fc", "Linear", 100, 100)
    b.op("aten::addmm", 110, 50, seq=11)
    b.op("AddmmBackward0", 400, 40, seq=11, fwd_tid=1)
    b.scope("fc", "Linear", 1100, 100)
    b.op("aten::addmm", 1110, 50, seq=21)
    b.op("AddmmBackward0", 1400, 40, seq=21, fwd_tid=1)
    m = Allocator(b)
    m.alloc(120, 1000, 0x1)  # freed by the first backward: held
    m.free(420, 1000, 0x1)
    m.alloc(130, 300, 0x2)  # freed between the backward and the next forward: held
    m.free(900, 300, 0x2)
    m.alloc(1120, 2000, 0x3)  # freed by the second backward: held
    m.free(1420, 2000, 0x3)
    m.alloc(1130, 7, 0x4)  # freed before the second backward: not held
    m.free(1300, 7, 0x4)
    p = analyze_built(b)
    assert use(p, "fc").own_activation_bytes == 3300


def test_an_inference_has_no_activations(analyze_built):
    b = forward_model(TraceBuilder())
    Allocator(b).alloc(35, 4096, 0x1)
    p = analyze_built(b)
    assert use(p, "fc").activation_bytes is None
    assert p.memory_summary.activation_bytes is None
    assert p.memory_summary.forward_end is None
    peak = p.memory_summary.peak  # an inference's forward blocks alive: its activations
    assert peak.activations_bytes == 4096 and peak.temporaries_bytes == 0
    assert [(h.qualified_name, h.bytes) for h in peak.activations_by_module] == [("fc", 4096)]


def test_traces_without_addresses_say_what_is_not_known(analyze_built):
    b = forward_model(TraceBuilder(era="2021"))
    b.op("AddmmBackward0", 600, 40, tid=2, seq=11, fwd_tid=1)
    b.memory(35, 4096)
    b.memory(620, -4096, tid=2)
    p = analyze_built(b)
    assert use(p, "fc").activation_bytes is None
    summary = p.memory_summary
    assert summary.lifetimes is None and summary.peak is None
    assert "no addresses" in summary.note


def test_the_peak_and_the_end_of_the_forward_by_category(analyze_built):
    p = analyze_built(training_step(TraceBuilder()))
    peak = p.memory_summary.peak
    assert (peak.step, peak.time_us, peak.phase) == (1, 720.0, "other")
    assert peak.module == "(not in any module)/Optimizer.step#SGD.step"
    assert peak.total_bytes == 21_008
    assert peak.activations_bytes == 512
    assert [(h.qualified_name, h.bytes) for h in peak.activations_by_module] == [("act", 512)]
    assert peak.gradients_bytes == 256
    assert peak.optimizer_state_bytes == 8192
    assert peak.temporaries_bytes == 4096
    assert peak.parameters_bytes is None and not peak.parameters_in_total
    assert peak.before_trace_bytes == BASE - 2048  # the block freed at 5 is gone
    end = p.memory_summary.forward_end
    assert (end.time_us, end.phase, end.module) == (170.0, "forward", "act")
    assert end.total_bytes == 12_560
    assert end.activations_bytes == 4096 + 512
    assert [(h.qualified_name, h.bytes) for h in end.activations_by_module] == [("fc", 4096), ("act", 512)]
    assert end.gradients_bytes == end.optimizer_state_bytes == end.temporaries_bytes == 0


def test_parameters_come_from_the_module_table(analyze_built):
    p = analyze_built(training_step(TraceBuilder(), params=6000))
    peak = p.memory_summary.peak
    assert peak.parameters_bytes == 6000 and peak.parameters_in_total
    assert peak.before_trace_bytes == BASE - 2048 - 6000
    # a total that cannot hold them
    p = analyze_built(training_step(TraceBuilder(), params=60_000))
    peak = p.memory_summary.peak
    assert peak.parameters_bytes == 60_000 and not peak.parameters_in_total
    assert peak.before_trace_bytes == BASE - 2048


def test_lifetimes_are_the_same_read_in_parallel(tmp_path):
    b = training_step(TraceBuilder())
    for i in range(3000):  # enough events for several runs of the parallel reader
        b.memory(900 + i * 0.01, 8, total=BASE, addr=0x100000 + i)
    path = b.write(tmp_path / "t.json")
    one = lifetimes(load_trace(path, cache=False, jobs=1))
    many = lifetimes(load_trace(path, cache=False, jobs=2, chunk_bytes=64 * 1024))
    for f in ("alloc", "free", "nbytes", "start", "end"):
        assert getattr(one, f).tolist() == getattr(many, f).tolist()


def test_a_job_shows_the_peak_per_rank(tmp_path):
    import traceprof
    from traceprof.job.records import rank_records
    from traceprof.render import render_job

    paths = []
    for rank, extra in ((0, 0), (1, 50_000)):  # rank 1 holds a block more
        b = training_step(TraceBuilder().cpu_rank(rank), extra=extra)
        paths.append(b.write(tmp_path / f"rank{rank}.json"))
    job = traceprof.analyze_job([str(p) for p in paths])
    peaks = [r.memory_peak_bytes for r in job.ranks]
    assert peaks[1] - peaks[0] == 50_000
    assert [r["memory_peak_bytes"] for r in rank_records(job)] == peaks
    text = render_job(job, "tree")
    header = next(line for line in text.splitlines() if line.startswith("rank "))
    assert "memory peak" in header


@pytest.mark.parametrize(
    "name",
    [
        "module_tree/h100_bert_small_inference.json.gz",
        "module_tree/h100_qwen1.5_0.5b_inference.json.gz",
        "module_tree/h100_vit_image_classification_inference.json.gz",
    ],
)
def test_real_traces_with_memory_events_say_what_holds_the_peak(name):
    """The shared H100 inference traces recorded with memory: every block paired, the peak's
    categories adding up to the allocator's total, its activations by module (an inference's
    outputs in flight), no activations kept for a backward (there is none)."""
    import traceprof

    p = traceprof.analyze(SHARED_TRACES / name)
    p.self_check()
    summary = p.memory_summary
    assert summary.device == "cuda:0" and summary.note is None
    assert summary.lifetimes > 0 and summary.activation_bytes is None
    peak = summary.peak
    parts = [peak.activations_bytes, peak.gradients_bytes, peak.optimizer_state_bytes, peak.temporaries_bytes]
    assert sum(parts) + peak.before_trace_bytes == pytest.approx(peak.total_bytes)
    assert peak.total_bytes == max(
        ph.peak_bytes for r in p.roots for m in p.nodes[r].memory for ph in m.phases if ph.peak_bytes
    )
    assert peak.activations_bytes > 0 and peak.activations_by_module
    assert peak.gradients_bytes == peak.optimizer_state_bytes == 0
    assert all(p.memory_of(n) is None or p.memory_of(n).activation_bytes is None for n in p.walk())
    assert summary.forward_end is None  # no backward
    assert any(line.startswith("peak:") for line in traceprof.render.render(p, "tree").splitlines())


def test_a_real_trace_without_addresses_says_so():
    import traceprof

    p = traceprof.analyze(SHARED_TRACES / "legacy_2021/resnet50_v100_2021.pt.trace.json.gz")
    summary = p.memory_summary
    assert summary.lifetimes is None and summary.peak is None and "no addresses" in summary.note
    assert any(line.startswith("holders:   ") for line in traceprof.render.render(p, "tree").splitlines())


def test_depth_and_top_fold_activations_as_they_fold_time():
    """A node cut by --depth holds its children's activations as its own; a ``(k more)`` node
    holds its group's; the subtree's add up after every transform (self_check)."""
    import traceprof
    from traceprof.result.model import NodeKind

    path = SAMPLE_TRACES / "gpt_train_memory_cpu.pt.trace.json.gz"
    full = traceprof.analyze(path)
    whole = full.memory_of(full.nodes[full.roots[0]]).activation_bytes
    cut = traceprof.analyze(path, depth=0)
    cut.self_check()
    root = cut.memory_of(cut.nodes[cut.roots[0]])
    assert root.own_activation_bytes == root.activation_bytes == whole
    top = traceprof.analyze(path, top=1)
    top.self_check()
    more = [n for n in top.walk() if n.kind is NodeKind.OTHERS]
    assert more and any(top.memory_of(n).activation_bytes for n in more)
    assert top.memory_of(top.nodes[top.roots[0]]).activation_bytes == whole

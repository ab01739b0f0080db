"""Attribution: GPU work and CPU time -> module nodes, forward and backward, per step.

Every quantity is attributed through a CPU event: a GPU work item through its anchor (the launch,
see :mod:`traceprof.link`), CPU time through the slice it was spent in (exclusive time). A CPU
event belongs to

- the **forward** of the node of its innermost scope, when it is not inside a backward node op;
- the **backward** of the node of a scope re-run inside the backward (activation checkpointing);
- otherwise the **backward** of the node of the forward op that created its backward node op;
- otherwise the "not in any module" bucket, grouped by its top-level op or annotation.

Steps: each item belongs to the ``ProfilerStep#N`` whose CPU interval holds its launch (or its
own start when it has no launch). Numbers are the mean over the selected steps.

FLOPs and bytes are those of the counted ops (:mod:`traceprof.flops`), attributed like every
other CPU event: a backward op goes to the module of the forward op that created it.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from typing import Sequence

import msgspec
from msgspec.structs import replace
import numpy as np

from traceprof.trace import hardware, schema
from traceprof.errors import OptionError
from traceprof.analysis.op_costs import OpCosts, count_ops
from traceprof.flops import FAMILIES, Family, Registry
from traceprof.analysis.hierarchy import Hierarchy, Source, build_hierarchy
from traceprof.analysis.link import Links, link
from traceprof.analysis import module_ops, step_timeline
from traceprof.analysis.memory import enclosing_slice, memory_by_node
from traceprof.result.model import (
    UNATTRIBUTED_NAME,
    FlopSummary,
    LinkStats,
    ModuleNode,
    ModuleProfile,
    NodeKind,
    PASSES,
    PassTotals,
    Peak,
    PhaseTimes,
    StepSelection,
    Times,
    UnsupportedOp,
)
from traceprof.trace.schema import Kind
from traceprof.trace.model import BLOCK_EVENTS, Trace, release_freed_memory, unique

_METRICS = Times.__struct_fields__
FORWARD, BACKWARD, OTHER = range(3)  # pass codes, the order of profile.PASSES
#: GPU work attributed to no CPU event above this share of the step's GPU busy time is a warning
UNATTRIBUTED_GPU_WARN_SHARE = 0.01
#: "(not in any module)" groups of GPU work whose launch is not in the trace
LAUNCHED_BEFORE_TRACE = "(launched before the trace)"
LAUNCH_NOT_IN_TRACE = "(launch not in trace)"
BETWEEN_OPS = "(step, between ops)"
#: for traces without module events (the hierarchy fell back to annotations or nothing)
NO_MODULES_WARNING = (
    "no module events in the trace, so no per-module numbers: record with "
    "torch.profiler.profile(with_stack=True) (nn.Module events), or capture with "
    "traceprof.capture.profile(model, ...) (exact module names and shapes; README, docs/capture.md)"
)
#: warning for traces whose ops carry no shapes
NO_SHAPES_WARNING = ("trace recorded without shapes (record_shapes=False): "
                     "FLOPs, bytes and throughput are not computed")


def _gives_memory_back(stage):
    """A stage that gives the memory its temporaries took back to the system when it returns.
    Freed into holes of the heap, it would stay resident while the next stage's temporaries
    land in other holes: at 1 GB of JSON that raised the peak by a quarter."""

    @functools.wraps(stage)
    def run(*args, **kwargs):
        try:
            return stage(*args, **kwargs)
        finally:
            release_freed_memory()

    return run


class Steps(msgspec.Struct, frozen=True):
    numbers: np.ndarray  # int64, sorted by start
    start: np.ndarray
    end: np.ndarray
    complete: np.ndarray  # bool

    def of_time(self, t: np.ndarray) -> np.ndarray:
        """Position (into these arrays) of the step holding each time, -1 outside steps."""
        if len(self.numbers) == 0:
            return np.full(len(t), -1, np.int64)
        pos = np.searchsorted(self.start, t, side="right") - 1
        ok = pos >= 0
        ok[ok] &= t[ok] < self.end[pos[ok]]
        return np.where(ok, pos, -1)


def analyze(
    trace: Trace,
    *,
    step: int | None = None,
    hierarchy: Source | str | None = None,
    formulas: Registry | None = None,
    peak_flops: float | None = None,
) -> ModuleProfile:
    """Attribute the trace's GPU and CPU time, FLOPs and bytes to its module tree.

    ``step``: a ``ProfilerStep`` number to analyze alone; by default the mean over the complete
    steps. ``hierarchy``: force a source of module information (see :class:`Source`).
    ``formulas``: the FLOP formulas to use (default: ``traceprof.flops.REGISTRY``).
    ``peak_flops``: the device's peak FLOP/s for MFU, replacing the peaks table's (and giving
    MFU on CPUs and devices not in it).
    """
    return analyze_steps(trace, [step], hierarchy=hierarchy, formulas=formulas,
                         peak_flops=peak_flops)[0]


def analyze_steps(
    trace: Trace,
    steps: Sequence[int | None],
    *,
    hierarchy: Source | str | None = None,
    formulas: Registry | None = None,
    peak_flops: float | None = None,
) -> list[ModuleProfile]:
    """One profile per entry of ``steps`` (a step number, or None for the mean over the complete
    steps), linking the trace, building its module tree and counting its ops once for all."""
    links = link(trace)
    release_freed_memory()  # as after each stage of the attribution (_gives_memory_back)
    tree = build_hierarchy(trace, links, hierarchy)
    found = find_steps(trace, links)
    costs = count_ops(trace, links, formulas, exclude=tree.scope_mask)
    release_freed_memory()
    hints = []
    if tree.source in (Source.ANNOTATIONS, Source.NONE) and hierarchy in (None, "auto"):
        hints.append(NO_MODULES_WARNING)
    profiles = []
    for step in steps:
        selected, selection_warnings = _select(found, step, trace.metadata.path)
        profile = _attribute(trace, links, tree, found, selected, hints + selection_warnings, costs)
        if peak_flops is not None:
            profile = _with_peak(profile, peak_flops)
        profiles.append(profile)
    return profiles


def _with_peak(profile: ModuleProfile, peak_flops: float) -> ModuleProfile:
    """``profile`` with the peak FLOP/s given by the user (``--peak-tflops``): for its main
    precision, keeping the table's memory bandwidth when the device is in it."""
    summary = profile.flops
    if not summary.has_shapes:
        return profile
    known = summary.peak
    names = sorted({d.name for d in profile.metadata.devices if d.name})
    device = known.device if known else (", ".join(names) if profile.has_gpu and names else "CPU")
    peak = Peak(device=device, precision=summary.precision or "fp32", flop_per_s=float(peak_flops),
                bytes_per_s=known.bytes_per_s if known else 0.0, source="given (--peak-tflops)")
    return replace(profile, flops=replace(summary, peak=peak))


def find_steps(trace: Trace, links: Links) -> Steps:
    ev = trace.events
    is_step_name = np.array([schema.STEP_RE.match(s) is not None for s in ev.names] or [False])
    idx = np.flatnonzero((links.depth >= 0) & is_step_name[ev.name]) if len(ev) else np.zeros(0, int)
    numbers = np.array([schema.step_number(ev.names[ev.name[i]]) for i in idx], np.int64)
    # one event per step number (a step seen on several threads keeps its widest interval)
    uniq = unique(numbers)
    step_start, step_end = ev.ts[idx], ev.ts[idx] + ev.dur[idx]
    start = np.array([step_start[numbers == u].min() for u in uniq], np.float64)
    end = np.array([step_end[numbers == u].max() for u in uniq], np.float64)
    order = np.argsort(start, kind="stable")
    steps = Steps(uniq[order], start[order], end[order], np.ones(len(uniq), bool))
    if len(uniq) == 0:
        return steps
    # A step is incomplete when a launch made in it has no GPU work in the trace (the trace
    # stopped before the GPU finished, or the work was dropped).
    launch_names = np.array([bool(schema.LAUNCH_NAME_RE.match(s)) for s in ev.names])
    launches = np.flatnonzero(
        (ev.kind == Kind.RUNTIME) & (ev.correlation >= 0) & launch_names[ev.name]
    )
    gpu_corr = unique(ev.correlation[links.gpu_work])
    if len(links.gpu_work):
        corr = ev.correlation[launches]
        at = np.minimum(np.searchsorted(gpu_corr, corr), len(gpu_corr) - 1)  # gpu_corr is sorted
        lost = launches[gpu_corr[at] != corr]  # no GPU work has their correlation
        bad = steps.of_time(ev.ts[lost])
        complete = steps.complete.copy()
        complete[bad[bad >= 0]] = False
        complete &= steps.end > steps.start
        steps = Steps(steps.numbers, steps.start, steps.end, complete)
    return steps


def _select(steps: Steps, step: int | None, path: str = "") -> tuple[np.ndarray, list[str]]:
    """Positions of the selected steps; empty array = the whole trace (no steps). ``path``: the
    trace's, the prefix of the error for a step not in it."""
    warnings: list[str] = []
    if step is not None:
        pos = np.flatnonzero(steps.numbers == step)
        if len(pos) == 0:
            have = ", ".join(map(str, steps.numbers.tolist())) or "none"
            where = f"{path}: " if path else ""
            raise OptionError(f"{where}step {step} is not in the trace (steps in the trace: {have})")
        if not steps.complete[pos[0]]:
            warnings.append(f"step {step} is incomplete: some of its GPU work is not in the trace")
        return pos, warnings
    if len(steps.numbers) == 0:
        return np.zeros(0, np.int64), warnings
    pos = np.flatnonzero(steps.complete)
    if len(pos) == 0:
        warnings.append("no complete step in the trace; using all steps")
        pos = np.arange(len(steps.numbers))
    return pos, warnings


class _Context(msgspec.Struct):
    """What every stage needs to know about the selection and the event nesting."""

    trace: Trace
    links: Links
    tree: Hierarchy
    steps: Steps
    selected: np.ndarray  # positions of the selected steps in steps.numbers
    selected_mask: np.ndarray  # whether each step is selected
    whole_trace: bool  # no step selected: the whole trace counts once
    n_steps: int  # numbers are divided by this: the mean per selected step
    scope_of: np.ndarray  # innermost module scope around each event (-1: none)
    is_step: np.ndarray  # ProfilerStep#N annotations
    is_python: np.ndarray  # Python frames
    top: np.ndarray  # outermost op or annotation around each event, through steps and frames
    autograd_top: np.ndarray  # top-level ops in which autograd recorded a backward node

    def in_selection(self, t: np.ndarray) -> np.ndarray:
        """Whether each time lies in a selected step."""
        if self.whole_trace:
            return np.isfinite(t)
        # in the step that started last before it, when that step is selected and has not
        # ended: the end of every step, -inf for those not selected and before the first
        # (index -1); in blocks, so that the temporaries stay small
        ends = np.append(np.where(self.selected_mask, self.steps.end, -np.inf), -np.inf)
        out = np.empty(len(t), bool)
        for lo in range(0, len(t), BLOCK_EVENTS):
            block = t[lo : lo + BLOCK_EVENTS]
            pos = np.searchsorted(self.steps.start, block, side="right")
            pos -= 1
            np.less(block, ends[pos], out=out[lo : lo + BLOCK_EVENTS])
        return out

    def classify(self, events: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Module node (-1: none), backward flag and pass code of each CPU event; in blocks,
        so that the dozen temporaries of the lookups stay a few MB whatever the number of
        events."""
        node = np.empty(len(events), self.tree.node_of_scope.dtype)
        bwd = np.empty(len(events), bool)
        code = np.empty(len(events), np.int8)
        for lo in range(0, len(events), BLOCK_EVENTS):
            block = slice(lo, lo + BLOCK_EVENTS)
            node[block], bwd[block] = _classify(events[block], self.links, self.tree,
                                                self.scope_of)
            code[block] = self.pass_codes(events[block], node[block], bwd[block])
        return node, bwd, code

    def pass_codes(self, events: np.ndarray, node: np.ndarray, bwd: np.ndarray) -> np.ndarray:
        """Pass code of each event, from _classify's node and backward flag: outside every
        module, forward only under a top-level op autograd recorded, else other."""
        code = np.where(bwd, BACKWARD, FORWARD).astype(np.int8)
        outside = ~bwd & (node < 0)
        e = np.maximum(events, 0)
        top = self.top
        recorded = (events >= 0) & (top[e] >= 0) & self.autograd_top[np.maximum(top[e], 0)]
        code[outside & ~recorded] = OTHER
        return code


@_gives_memory_back
def _context(trace: Trace, links: Links, tree: Hierarchy, steps: Steps,
             selected: np.ndarray) -> _Context:
    """The selection and, for every event, its scope, its top-level op and whether it is a
    step or a Python frame."""
    ev = trace.events
    n_events = len(ev)
    whole_trace = len(selected) == 0
    is_step = np.zeros(n_events, bool)
    if len(ev):
        is_step_name = np.array([schema.STEP_RE.match(s) is not None for s in ev.names])
        is_step = is_step_name[ev.name] & (links.depth >= 0)
    # group label: the outermost op or annotation around the event, looking through steps and
    # Python frames (which enclose everything in with_stack traces)
    is_python = ev.kind == Kind.PYTHON
    top = links.outermost(is_step | is_python)
    # top-level ops outside the modules that autograd recorded (an op in them created a backward
    # node: the loss): their work is forward; the rest outside modules is neither pass
    autograd_top = np.zeros(n_events, bool)
    made_backward = links.forward_op[links.forward_op >= 0]
    tops_of = top[made_backward]
    autograd_top[tops_of[tops_of >= 0]] = True
    selected_mask = np.zeros(len(steps.numbers), bool)
    selected_mask[selected] = True
    return _Context(
        trace=trace, links=links, tree=tree, steps=steps, selected=selected,
        selected_mask=selected_mask,
        whole_trace=whole_trace, n_steps=1 if whole_trace else len(selected),
        scope_of=links.nearest(tree.scope_mask), is_step=is_step, is_python=is_python,
        top=top, autograd_top=autograd_top,
    )


class _CpuTime(msgspec.Struct):
    """Exclusive time of every CPU slice in the selection, and where it goes."""

    events: np.ndarray
    exclusive_us: np.ndarray
    node: np.ndarray
    pass_code: np.ndarray


@_gives_memory_back
def _cpu_time(ctx: _Context) -> _CpuTime:
    """CPU time: the exclusive time of every CPU slice in the selection."""
    ev, links = ctx.trace.events, ctx.links
    cpu = np.flatnonzero(links.depth >= 0).astype(links.parent.dtype)
    cpu = cpu[ctx.in_selection(ev.ts[cpu])]
    span = links.nest_end[cpu] - ev.ts[cpu]
    # the time of each slice's children, summed over the slices of the selection only (arrays
    # of the selection, not of every event): children outside the selection do not happen, a
    # child starts inside its parent's step
    parent = links.parent[cpu]
    at = np.searchsorted(cpu, parent)  # the parent's position in ``cpu`` when it is there
    child = (parent >= 0) & (at < len(cpu))
    child[child] &= cpu[at[child]] == parent[child]
    del parent
    child_time = np.bincount(at[child], weights=span[child], minlength=len(cpu))
    del at, child
    cpu_excl = span  # the span less the children's time, in place
    cpu_excl -= child_time
    np.maximum(cpu_excl, 0.0, out=cpu_excl)
    del span, child_time
    node, _, pass_code = ctx.classify(cpu)
    return _CpuTime(cpu, cpu_excl, node, pass_code)


class _GpuWork(msgspec.Struct):
    """GPU work items in the selection (by the time of their launch), and where they go."""

    work: np.ndarray
    anchor: np.ndarray  # the CPU event each item is attributed through (-1: none)
    node: np.ndarray
    pass_code: np.ndarray
    busy_us: np.ndarray  # share of the device's busy time
    no_launch: np.ndarray
    before_trace: np.ndarray  # launched before the profiler's CPU window opened
    is_kernel: np.ndarray  # 1.0 for kernels, 0.0 for memcpy/memset


@_gives_memory_back
def _gpu_work(ctx: _Context) -> _GpuWork:
    """GPU work in the selection: its busy-time share, its anchor's node and pass, and whether
    its launch is missing from the trace."""
    ev, links = ctx.trace.events, ctx.links
    work = links.gpu_work
    anchor = links.anchor
    when = np.where(anchor >= 0, ev.ts[np.maximum(anchor, 0)], ev.ts[work])
    keep = ctx.in_selection(when)
    work, anchor = work[keep], anchor[keep]
    node, _, pass_code = ctx.classify(anchor)
    busy = _shared_busy_time(ev, work)
    # work without a launch in the trace: launched before the trace began when its correlation
    # id is below every launch's in the trace (the profiler's CPU window opened later)
    launch_corr = ev.correlation[(ev.kind == Kind.RUNTIME) & (ev.correlation >= 0)]
    first_launch = launch_corr.min() if len(launch_corr) else -1
    no_launch = anchor < 0
    before_trace = no_launch & (ev.correlation[work] >= 0) & (ev.correlation[work] < first_launch)
    is_kernel = (ev.kind[work] == Kind.KERNEL).astype(np.float64)
    return _GpuWork(work, anchor, node, pass_code, busy, no_launch, before_trace, is_kernel)


class _Ops(msgspec.Struct):
    """Ops in the selection (``keep``: which of the candidates), and where they go."""

    keep: np.ndarray
    events: np.ndarray
    node: np.ndarray
    pass_code: np.ndarray


def _ops_in_selection(ctx: _Context, candidates: np.ndarray) -> _Ops:
    """The ops among ``candidates`` in the selection, with their node and pass."""
    keep = ctx.in_selection(ctx.trace.events.ts[candidates])
    ops = candidates[keep]
    node, _, pass_code = ctx.classify(ops)
    return _Ops(keep, ops, node, pass_code)


class _Groups:
    """The "not in any module" groups: one node per top-level op or annotation name, numbered
    after the module nodes and the bucket in the order they are first met."""

    def __init__(self, ctx: _Context) -> None:
        self.ctx = ctx
        self.n_modules = len(ctx.tree.nodes)
        self.bucket = self.n_modules
        self.ids: dict[str, int] = {}

    def of(self, anchors: np.ndarray, missing: str = LAUNCH_NOT_IN_TRACE) -> np.ndarray:
        """The group node of each event, by the name of its top-level op or annotation."""
        ctx, ev = self.ctx, self.ctx.trace.events
        tops = np.where(anchors >= 0, ctx.top[np.maximum(anchors, 0)], -1)
        uniq, inverse = np.unique(tops, return_inverse=True)
        # the label of each top as a code: its name's, or one past the names for the others
        names, n = ev.names, len(ev.names)
        others = (missing, BETWEEN_OPS, "(Python code)")
        t = np.maximum(uniq, 0)
        code = np.select([uniq < 0, ctx.is_step[t], ctx.is_python[t]], [n, n + 1, n + 2],
                         ev.name[t])
        codes, first, of_code = np.unique(code, return_index=True, return_inverse=True)
        ids = np.empty(len(codes), np.int64)
        for k in np.argsort(first).tolist():  # numbered in the order of the tops
            c = int(codes[k])
            label = names[c] if c < n else others[c - n]
            ids[k] = self.ids.setdefault(label, self.n_modules + 1 + len(self.ids))
        return ids[of_code.ravel()][inverse.ravel()]

    @property
    def n_nodes(self) -> int:
        return self.n_modules + 1 + len(self.ids)

    def names(self) -> dict[int, str]:
        return {v: k for k, v in self.ids.items()}


def _group_unattributed(groups: _Groups, cpu: _CpuTime, gpu: _GpuWork, counted: _Ops,
                        unsupported: _Ops) -> None:
    """Put every event outside the modules into its "not in any module" group (in place)."""
    cpu.node[cpu.node < 0] = groups.of(cpu.events[cpu.node < 0])
    gpu.node[gpu.before_trace] = groups.of(gpu.anchor[gpu.before_trace], LAUNCHED_BEFORE_TRACE)
    gpu.node[gpu.node < 0] = groups.of(gpu.anchor[gpu.node < 0])
    counted.node[counted.node < 0] = groups.of(counted.events[counted.node < 0])
    unsupported.node[unsupported.node < 0] = groups.of(unsupported.events[unsupported.node < 0])


class _MemoryEvents(msgspec.Struct):
    """[memory] events in the selection (``keep``), their node and pass."""

    keep: np.ndarray
    node: np.ndarray
    pass_code: np.ndarray


@_gives_memory_back
def _memory_events(ctx: _Context, groups: _Groups) -> _MemoryEvents:
    """[memory] events: the innermost CPU slice around each, then attributed like CPU time."""
    trace, links = ctx.trace, ctx.links
    memory = trace.memory
    if memory is None or not len(memory):
        return _MemoryEvents(np.zeros(0, bool), np.zeros(0, np.int64), np.zeros(0, np.int8))
    keep = ctx.in_selection(trace.events.ts[memory.event])
    around = enclosing_slice(trace, links.nest_end, links.parent,
                             np.flatnonzero(links.depth >= 0).astype(links.parent.dtype),
                             memory.event[keep])
    node, _, pass_code = ctx.classify(around)
    outside = (node < 0) & (around >= 0)
    node[outside] = groups.of(around[outside])
    node[node < 0] = groups.bucket  # no slice around it at all
    return _MemoryEvents(keep, node, pass_code)


@_gives_memory_back
def _own_metrics(ctx: _Context, n_nodes: int, cpu: _CpuTime, gpu: _GpuWork, counted: _Ops,
                 unsupported: _Ops, costs: OpCosts) -> dict[str, np.ndarray]:
    """Each node's own value of every metric, per pass: own[metric][pass, node], per step."""

    def sums(node, phase, weights) -> np.ndarray:
        out = np.zeros((len(PASSES), n_nodes))
        for ph in range(len(PASSES)):
            m = phase == ph
            out[ph] = np.bincount(node[m], weights=weights[m], minlength=n_nodes)[:n_nodes]
        return out / ctx.n_steps

    ev = ctx.trace.events
    k = counted.keep
    return {
        "gpu_busy_us": sums(gpu.node, gpu.pass_code, gpu.busy_us),
        "gpu_work_us": sums(gpu.node, gpu.pass_code, ev.dur[gpu.work]),
        "cpu_us": sums(cpu.node, cpu.pass_code, cpu.exclusive_us),
        "kernels": sums(gpu.node, gpu.pass_code, gpu.is_kernel),
        "flops": sums(counted.node, counted.pass_code, costs.flops[k]),
        "macs": sums(counted.node, counted.pass_code, costs.macs[k]),
        "bytes_read": sums(counted.node, counted.pass_code, costs.bytes_read[k]),
        "bytes_written": sums(counted.node, counted.pass_code, costs.bytes_written[k]),
        "unsupported_ops": sums(unsupported.node, unsupported.pass_code,
                                np.ones(len(unsupported.events))),
    }


def _calls(ctx: _Context, n_nodes: int) -> np.ndarray:
    """Calls of each node: its forward scope events in the selection, per step."""
    tree, ev = ctx.tree, ctx.trace.events
    scope_events = np.flatnonzero(tree.scope_mask & ~tree.recompute_mask)
    scope_events = scope_events[ctx.in_selection(ev.ts[scope_events])]
    return np.bincount(tree.node_of_scope[scope_events], minlength=n_nodes)[:n_nodes] / ctx.n_steps


class _Shape(msgspec.Struct):
    """The result tree: each node's parent and children in display order, the roots."""

    parent: np.ndarray
    children: dict[int, list[int]]
    roots: list[int]  # module roots by first call, then the bucket


def _tree_shape(tree: Hierarchy, groups: _Groups, total: dict[str, np.ndarray] | None,
                parent: np.ndarray) -> _Shape:
    """Children in display order: modules by first call, groups biggest first."""
    n_nodes = groups.n_nodes
    n_mod = groups.n_modules
    children: dict[int, list[int]] = {i: [] for i in range(n_nodes)}
    order_key = np.zeros(n_nodes)
    for hn in tree.nodes:
        order_key[hn.id] = hn.first_ts
    # groups: biggest first
    for g in range(n_mod + 1, n_nodes):
        order_key[g] = -(total["gpu_busy_us"][:, g].sum() or total["cpu_us"][:, g].sum() / 1e9)
    for i in np.argsort(order_key, kind="stable").tolist():
        if parent[i] >= 0:
            children[int(parent[i])].append(i)
    module_roots = [hn.id for hn in sorted(tree.nodes, key=lambda h: h.first_ts) if hn.parent < 0]
    return _Shape(parent, children, module_roots + [groups.bucket])


def _parents(tree: Hierarchy, groups: _Groups) -> np.ndarray:
    """Parent of each node: the module tree's, and the bucket for every group."""
    parent = np.full(groups.n_nodes, -1, np.int64)
    for hn in tree.nodes:
        parent[hn.id] = hn.parent
    parent[groups.n_modules + 1 :] = groups.bucket
    return parent


def _module_nodes(ctx: _Context, groups: _Groups, shape: _Shape, own, total, calls,
                  memory_use, ops_of) -> tuple[list[ModuleNode], dict[int, int]]:
    """The ModuleNodes in pre-order (parents before children, siblings in display order), and
    the new id of each node."""
    tree = ctx.tree
    n_mod, bucket = groups.n_modules, groups.bucket
    parent, children = shape.parent, shape.children
    names_of_groups = groups.names()
    table = ctx.trace.metadata.module_table

    def phase_times(i: int, phase: int) -> PhaseTimes:
        return PhaseTimes(
            own=Times(*(float(own[k][phase, i]) for k in _METRICS)),
            total=Times(*(float(total[k][phase, i]) for k in _METRICS)),
        )

    preorder: list[int] = []
    stack = list(reversed(shape.roots))
    while stack:
        i = stack.pop()
        preorder.append(i)
        stack.extend(reversed(children[i]))
    new_id = {old: new for new, old in enumerate(preorder)}
    nodes: list[ModuleNode] = []
    depth_of: dict[int, int] = {}
    for old in preorder:
        p = int(parent[old])
        depth = depth_of[old] = depth_of[p] + 1 if p >= 0 else 0
        if old < n_mod:
            hn = tree.nodes[old]
            info = table.modules.get(hn.qualified_name) if table else None
            kind, class_name, qual, path = NodeKind.MODULE, hn.class_name, hn.qualified_name, hn.path
            name = _short_name(hn, tree.source)
        elif old == bucket:
            info, kind, class_name = None, NodeKind.UNATTRIBUTED, ""
            name = qual = UNATTRIBUTED_NAME
            path = (UNATTRIBUTED_NAME,)
        else:
            info, kind, class_name = None, NodeKind.GROUP, ""
            name = names_of_groups[old]
            qual = f"{UNATTRIBUTED_NAME}/{name}"
            path = (UNATTRIBUTED_NAME, name)
        nodes.append(
            ModuleNode(
                id=new_id[old],
                parent=new_id[p] if p >= 0 else -1,
                children=tuple(new_id[c] for c in children[old]),
                depth=depth,
                kind=kind,
                name=name,
                class_name=class_name,
                qualified_name=qual,
                path=path,
                calls=float(calls[old]) if old < n_mod else 0.0,
                forward=phase_times(old, FORWARD),
                backward=phase_times(old, BACKWARD),
                other=phase_times(old, OTHER),
                info=info,
                memory=memory_use[old],
                ops=ops_of[old],
            )
        )
    return nodes, new_id


@_gives_memory_back
def _module_ops(ctx: _Context, groups: _Groups, cpu: _CpuTime, gpu: _GpuWork, counted: _Ops,
                costs: OpCosts) -> list:
    """Each node's own ops and kernels per pass (traceprof.module_ops)."""
    return module_ops.ops_by_node(
        ctx.trace, ctx.links, ctx.tree.scope_mask, ctx.is_step, groups.n_nodes, ctx.n_steps,
        cpu=module_ops.Attributed(cpu.events, cpu.node, cpu.pass_code, cpu.exclusive_us),
        counted=module_ops.Attributed(counted.events, counted.node, counted.pass_code,
                                      costs.flops[counted.keep]),
        gpu=module_ops.Attributed(gpu.work, gpu.node, gpu.pass_code, gpu.busy_us),
        gpu_anchor=gpu.anchor)


@_gives_memory_back
def _step_timeline(ctx: _Context, parent: np.ndarray, paths: list, cpu: _CpuTime,
                   gpu: _GpuWork, memory: _MemoryEvents, memory_device: str | None):
    """The timeline of the first selected step (the whole trace when it has no steps) and
    its memory curve (traceprof.step_timeline)."""
    ev, steps = ctx.trace.events, ctx.steps
    if not ctx.whole_trace:
        pos = int(ctx.selected[0])
        window = (float(steps.start[pos]), float(steps.end[pos]))
        number: int | None = int(steps.numbers[pos])
    else:
        finite = np.isfinite(ev.ts)
        if not finite.any():
            return None
        window = (float(ev.ts[finite].min()), float((ev.ts + ev.dur)[finite].max()) + 1e-3)
        number = None
    depth = np.zeros(len(parent), np.int64)
    for i in range(len(parent)):  # parents precede children in creation order
        if parent[i] >= 0:
            depth[i] = depth[parent[i]] + 1
    mem = None
    if len(memory.keep):
        mem = step_timeline.StepEvents(np.flatnonzero(memory.keep), memory.node,
                                       memory.pass_code)
    return step_timeline.build_timeline(
        ctx.trace, ctx.links, window=window, step=number, scope_mask=ctx.tree.scope_mask,
        node_of_scope=ctx.tree.node_of_scope, recompute_mask=ctx.tree.recompute_mask,
        n_modules=len(ctx.tree.nodes), depth_of=depth, path_of=paths,
        cpu=step_timeline.StepEvents(cpu.events, cpu.node, cpu.pass_code),
        gpu=step_timeline.StepEvents(gpu.work, gpu.node, gpu.pass_code),
        memory=mem, memory_device=memory_device)


def _step_selection(ctx: _Context, cpu: _CpuTime, gpu: _GpuWork, counted: _Ops,
                    unsupported: _Ops, costs: OpCosts) -> StepSelection:
    """The selected steps and the totals of the selection, per step."""
    ev, steps, selected, n_steps = ctx.trace.events, ctx.steps, ctx.selected, ctx.n_steps
    sel_numbers = tuple(int(x) for x in steps.numbers[selected]) if not ctx.whole_trace else ()
    if ctx.whole_trace:
        finite = ev.ts[np.isfinite(ev.ts)]
        wall = float((ev.ts + ev.dur)[np.isfinite(ev.ts)].max() - finite.min()) if len(finite) else 0.0
    else:
        wall = float((steps.end[selected] - steps.start[selected]).mean())
    busy, op_keep = gpu.busy_us, counted.keep
    return StepSelection(
        numbers=sel_numbers,
        in_trace=tuple(int(x) for x in steps.numbers),
        incomplete=tuple(int(x) for x in steps.numbers[~steps.complete]),
        count=n_steps,
        wall_us=wall,
        gpu_busy_us=float(busy.sum() / n_steps),
        gpu_work_us=float(ev.dur[gpu.work].sum() / n_steps),
        cpu_us=float(cpu.exclusive_us.sum() / n_steps),
        kernels=float(gpu.is_kernel.sum() / n_steps),
        flops=float(costs.flops[op_keep].sum() / n_steps),
        macs=float(costs.macs[op_keep].sum() / n_steps),
        bytes_read=float(costs.bytes_read[op_keep].sum() / n_steps),
        bytes_written=float(costs.bytes_written[op_keep].sum() / n_steps),
        unsupported_ops=float(len(unsupported.events) / n_steps),
        cpu_between_ops_us=float(cpu.exclusive_us[ctx.is_step[cpu.events]].sum() / n_steps),
        gpu_launched_before_trace_us=float(busy[gpu.before_trace].sum() / n_steps),
        gpu_launch_missing_us=float(busy[gpu.no_launch & ~gpu.before_trace].sum() / n_steps),
    )


@_gives_memory_back
def _link_stats(trace: Trace, links: Links) -> LinkStats:
    """How many events, GPU work items and backward nodes the linker joined."""
    ev = trace.events
    bwd_nodes = np.flatnonzero(
        links.backward_node == np.arange(len(ev), dtype=links.backward_node.dtype))
    return LinkStats(
        events=len(ev),
        kernels=ev.count(Kind.KERNEL),
        memcpys=ev.count(Kind.MEMCPY),
        memsets=ev.count(Kind.MEMSET),
        gpu_work_with_launch=int(np.count_nonzero(links.anchor >= 0)),
        gpu_work_without_launch=int(np.count_nonzero(links.anchor < 0)),
        backward_nodes=len(bwd_nodes),
        backward_nodes_linked=int(np.count_nonzero(links.forward_op[bwd_nodes] >= 0)),
        nesting_conflicts=links.nesting_conflicts,
    )


def _optimizer_totals(nodes: list[ModuleNode]) -> PassTotals:
    """The work of the optimizer step groups, per pass."""
    optimizer = PassTotals()
    for n in nodes:
        if n.kind is NodeKind.GROUP and n.name.startswith(schema.OPTIMIZER_STEP_PREFIXES):
            optimizer = PassTotals(optimizer.forward + n.forward.total,
                                   optimizer.backward + n.backward.total,
                                   optimizer.other + n.other.total)
    return optimizer


def _attribute(trace, links, tree: Hierarchy, steps: Steps, selected, warnings,
               costs: OpCosts) -> ModuleProfile:
    """The ModuleProfile of the selected steps: every stage in order."""
    ctx = _context(trace, links, tree, steps, selected)
    cpu = _cpu_time(ctx)
    gpu = _gpu_work(ctx)
    counted = _ops_in_selection(ctx, costs.counted)
    unsupported = _ops_in_selection(ctx, costs.unsupported)
    groups = _Groups(ctx)
    _group_unattributed(groups, cpu, gpu, counted, unsupported)
    memory = _memory_events(ctx, groups)
    n_nodes = groups.n_nodes
    own = _own_metrics(ctx, n_nodes, cpu, gpu, counted, unsupported, costs)
    calls = _calls(ctx, n_nodes)
    parent = _parents(tree, groups)
    total = {k: _subtree_totals(v, parent) for k, v in own.items()}
    shape = _tree_shape(tree, groups, total, parent)
    memory_use = memory_by_node(trace, memory.keep, memory.node, memory.pass_code, parent,
                                ctx.n_steps)
    ops_of = _module_ops(ctx, groups, cpu, gpu, counted, costs)
    nodes, new_id = _module_nodes(ctx, groups, shape, own, total, calls, memory_use, ops_of)
    timeline = _step_timeline(ctx, parent, [nodes[new_id[i]].path for i in range(n_nodes)],
                              cpu, gpu, memory, _memory_device(memory_use))

    selection = _step_selection(ctx, cpu, gpu, counted, unsupported, costs)
    stats = _link_stats(trace, links)
    all_warnings = list(trace.metadata.warnings) + list(tree.warnings) + warnings
    all_warnings += _unattributed_gpu_warnings(
        selection, int(gpu.before_trace.sum()), int((gpu.no_launch & ~gpu.before_trace).sum()),
        len(gpu.work))
    if not costs.has_shapes:
        all_warnings.append(NO_SHAPES_WARNING)
    has_gpu = stats.kernels + stats.memcpys + stats.memsets > 0
    flop_summary = _flop_summary(
        trace, links, costs, counted.keep, unsupported.keep, gpu.anchor, gpu.busy_us,
        ctx.n_steps, has_gpu, selection.gpu_busy_us if has_gpu else selection.cpu_us,
    )
    return ModuleProfile(
        metadata=trace.metadata,
        source=tree.source.value,
        source_description=tree.source.description,
        nodes=tuple(nodes),
        roots=tuple(new_id[r] for r in shape.roots),
        selection=selection,
        stats=stats,
        module_nodes=groups.n_modules,
        warnings=tuple(all_warnings),
        flops=flop_summary,
        optimizer_step=_optimizer_totals(nodes),
        memory_device=_memory_device(memory_use),
        timeline=timeline,
    )


def _unattributed_gpu_warnings(sel: StepSelection, n_before: int, n_missing: int,
                               n_work: int) -> list[str]:
    """A warning for each kind of GPU work attributed to no CPU event, when its share of the
    step's GPU busy time is above UNATTRIBUTED_GPU_WARN_SHARE."""
    from traceprof import units  # warnings are text: numbers formatted in the one place

    out = []
    if sel.gpu_busy_us <= 0:
        return out
    for us, count, group, reason in (
        (sel.gpu_launched_before_trace_us, n_before, LAUNCHED_BEFORE_TRACE,
         "launched before the trace began (correlation ids below the first launch in the trace: "
         "the profiler's CPU window opened after the launches)"),
        (sel.gpu_launch_missing_us, n_missing, LAUNCH_NOT_IN_TRACE,
         "has no launch in the trace (no runtime call with its correlation id)"),
    ):
        share = us / sel.gpu_busy_us
        if share > UNATTRIBUTED_GPU_WARN_SHARE:
            out.append(
                f"{units.percent(share)} of the step's GPU busy time ({units.duration(us)} per "
                f"step; {units.count(count)} of the {units.count(n_work)} GPU work items of the "
                f"selected steps) "
                f"{reason}: counted in the step's GPU time, attributed to no module, under "
                f"{UNATTRIBUTED_NAME}/{group} in the other pass"
            )
    return out


def _memory_device(memory_use: list) -> str | None:
    seen = list(dict.fromkeys(m.device for uses in memory_use for m in uses))
    accelerators = [d for d in seen if d != "cpu"]
    return accelerators[0] if accelerators else (seen[0] if seen else None)


@_gives_memory_back
def _flop_summary(trace, links, costs: OpCosts, op_keep, unsupported_keep, anchor, busy,
                  n_steps: int, has_gpu: bool, step_time_us: float) -> FlopSummary:
    """FLOPs by precision, the device's peak for the main one, and the unsupported ops with
    their calls and time per step. ``anchor`` and ``busy``: the selected GPU work items'
    anchors and busy-time shares."""
    if not costs.has_shapes:
        return FlopSummary(has_shapes=False)
    peaks = _device_peaks(trace) if has_gpu else None
    # precision of each op: its dtype's, except fp32 convolutions on GPUs with TF32 units, which
    # cuDNN runs in TF32 by default (torch.backends.cudnn.allow_tf32)
    conv = FAMILIES.index(Family.CONV)
    pair = costs.dtype[op_keep].astype(np.int64) * len(FAMILIES) + costs.family[op_keep]
    pairs, inverse = np.unique(pair, return_inverse=True)
    flops_of_pair = np.bincount(inverse.ravel(), weights=costs.flops[op_keep], minlength=len(pairs))
    by_precision: dict[str, float] = defaultdict(float)
    for code, flops in zip(pairs.tolist(), flops_of_pair.tolist()):
        dtype, family = costs.dtypes[code // len(FAMILIES)], code % len(FAMILIES)
        precision = hardware.PRECISION_OF_DTYPE.get(dtype, dtype)
        if precision == "fp32" and family == conv and peaks and peaks.peak("tf32"):
            precision = "tf32"
        by_precision[precision] += flops / n_steps
    ranked = tuple(sorted(((k, v) for k, v in by_precision.items() if v > 0),
                          key=lambda kv: -kv[1]))
    peak = None
    if peaks is not None:
        precision = ranked[0][0] if ranked else "fp32"
        peak = Peak(peaks.name, precision, peaks.peak(precision), peaks.bytes_per_s, peaks.source)

    # unsupported ops: calls, and the GPU time of the work they launched themselves, not
    # through an op inside them (their own CPU time on CPU-only traces)
    events = costs.unsupported[unsupported_keep]
    labels = costs.unsupported_label[unsupported_keep]
    n_labels = len(costs.labels)
    calls = np.bincount(labels, minlength=n_labels)
    if has_gpu:
        is_op = costs.is_op.copy()
        is_op[events] = True
        around = links.nearest(is_op)
        del is_op
        inside = np.where(anchor >= 0, around[np.maximum(anchor, 0)], -1)
        del around
        # the unsupported op each item was launched in: its row in ``events`` (ascending)
        at = np.searchsorted(events, inside)
        has = (inside >= 0) & (at < len(events))
        has[has] &= events[at[has]] == inside[has]
        time = np.bincount(labels[at[has]], weights=busy[has], minlength=n_labels)
    else:
        own = costs.unsupported_own_us[unsupported_keep]
        time = np.bincount(labels, weights=own, minlength=n_labels)
    listed = [
        UnsupportedOp(
            name=costs.labels[k], calls=float(calls[k] / n_steps), time_us=float(time[k] / n_steps),
            share_of_step=float(time[k] / n_steps / step_time_us) if step_time_us > 0 else 0.0,
        )
        for k in range(n_labels) if calls[k]
    ]
    listed.sort(key=lambda u: (-u.time_us, -u.calls, u.name))
    return FlopSummary(True, ranked, peak, tuple(listed))


def _device_peaks(trace) -> hardware.DevicePeaks | None:
    for device in trace.metadata.devices:
        found = hardware.find_peaks(device.name, device.memory_bytes)
        if found is not None:
            return found
    return None


def _classify(events: np.ndarray, links: Links, tree: Hierarchy, scope_of: np.ndarray):
    """Module node (-1: none) and backward flag of each CPU event (-1 event: none, forward)."""
    n = len(events)
    node = np.full(n, -1, tree.node_of_scope.dtype)
    valid = events >= 0
    e = np.maximum(events, 0)
    bnode = np.where(valid, links.backward_node[e], -1)
    region = np.where(valid, links.backward_region[e], -1)
    scope = np.where(valid, scope_of[e], -1)
    backward = region >= 0
    fwd = valid & ~backward & (scope >= 0)
    node[fwd] = tree.node_of_scope[scope[fwd]]
    # a scope opened inside the backward: a module re-run by activation checkpointing
    inner = backward & (scope >= 0)
    inner[inner] &= links.depth[scope[inner]] > links.depth[region[inner]]
    node[inner] = tree.node_of_scope[scope[inner]]
    # otherwise: the module of the forward op that created the backward node
    rest = backward & ~inner & (bnode >= 0)
    fop = np.full(n, -1, links.forward_op.dtype)
    fop[rest] = links.forward_op[bnode[rest]]
    has = fop >= 0
    fscope = np.full(n, -1, scope_of.dtype)
    fscope[has] = scope_of[fop[has]]
    ok = fscope >= 0
    node[ok] = tree.node_of_scope[fscope[ok]]
    return node, backward


def _shared_busy_time(ev, work: np.ndarray) -> np.ndarray:
    """Each work item's share of GPU busy time: concurrent items split an instant equally.
    Computed per device; the shares of a device add up to the union of its work intervals."""
    share = np.zeros(len(work))
    if len(work) == 0:
        return share
    pid_of_thread = np.array([t.pid for t in ev.threads], dtype=object)
    device_codes = np.unique(pid_of_thread[ev.thread[work]], return_inverse=True)[1].ravel()
    for dev in unique(device_codes):
        m = np.flatnonzero(device_codes == dev)
        s = ev.ts[work[m]]
        e = s + ev.dur[work[m]]
        k = len(m)
        t = np.concatenate([s, e])
        order = np.argsort(t, kind="stable")
        tt = t[order]
        coverage = np.cumsum(np.where(order < k, 1, -1))
        seg = np.diff(tt)
        c = coverage[:-1]
        w = np.where(c > 0, seg / np.maximum(c, 1), 0.0)
        cum = np.concatenate([[0.0], np.cumsum(w)])
        pos = np.empty(2 * k, np.int64)
        pos[order] = np.arange(2 * k)
        share[m] = cum[pos[k:]] - cum[pos[:k]]
    return share


def _subtree_totals(own: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """own[phase, node] summed over each node's subtree."""
    total = own.copy()
    depth = np.zeros(len(parent), np.int64)
    for i in range(len(parent)):  # parents precede children in creation order
        if parent[i] >= 0:
            depth[i] = depth[parent[i]] + 1
    for i in np.argsort(-depth, kind="stable"):
        if parent[i] >= 0:
            total[:, parent[i]] += total[:, i]
    return total


def _short_name(hn, source: Source) -> str:
    if source in (Source.TRACEPROF, Source.LIGHTNING):
        return hn.qualified_name.rsplit(".", 1)[-1] if hn.qualified_name else hn.class_name
    return hn.key

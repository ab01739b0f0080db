"""The stages that keep per-event detail, fed with the attributed events.

Receives the :class:`~traceprof.analysis.classify.Context` and the attributed CPU slices, GPU
work, counted ops and ``[memory]`` events (node and pass set, groups included) and returns what
:mod:`traceprof.analysis.module_ops` and :mod:`traceprof.analysis.step_timeline` make of them:
:func:`node_ops` each node's own ops and kernels, :func:`first_step_timeline` the timeline of
the first selected step.
"""

from __future__ import annotations

import numpy as np

from traceprof.analysis import memory_holders, module_ops, step_timeline
from traceprof.analysis.classify import Context
from traceprof.analysis.compiled import CompiledWork
from traceprof.analysis.counted_ops import Ops
from traceprof.analysis.cpu_time import CpuTime
from traceprof.analysis.gpu_work import GpuWork
from traceprof.analysis.hierarchy import scope_labels
from traceprof.analysis.kernel_labels import LabelWork, label_fused_rows
from traceprof.analysis.lifetimes import Lifetimes
from traceprof.analysis.memory_events import SelectedMemory
from traceprof.analysis.memory_holders import BackwardSpans
from traceprof.analysis.op_costs import OpCosts
from traceprof.analysis.stage import gives_memory_back
from traceprof.analysis.tree_levels import node_depths
from traceprof.analysis.unattributed import Groups
from traceprof.result.model import PASSES, OpKind, OpStat
from traceprof.result.timeline import Timeline
from traceprof.trace.columns import EventTable

PASS_VALUES = tuple(p.value for p in PASSES)


@gives_memory_back
def node_ops(
    ctx: Context,
    groups: Groups,
    cpu: CpuTime,
    gpu: GpuWork,
    counted: Ops,
    costs: OpCosts,
    compiled: CompiledWork | None = None,
    labels: LabelWork | None = None,
) -> list[tuple[OpStat, ...]]:
    """Each node's own ops and kernels per pass (traceprof.analysis.module_ops); with compiled
    work, a graph run's kernels are ops of their own (not the region's), and the rows of
    kernels fused across modules (by the compiled-kernel table or by their kernel labels) name
    the modules."""
    scope_mask = ctx.tree.scope_mask
    if compiled is not None:
        scope_mask = scope_mask | compiled.boundary
    rows = module_ops.ops_by_node(
        ctx.trace,
        ctx.links,
        scope_mask,
        ctx.is_step,
        groups.n_nodes,
        ctx.n_steps,
        cpu=module_ops.Attributed(cpu.events, cpu.node, cpu.pass_code, cpu.exclusive_us),
        counted=module_ops.Attributed(
            counted.events, counted.node, counted.pass_code, costs.flops[counted.keep]
        ),
        gpu=module_ops.Attributed(gpu.work, gpu.node, gpu.pass_code, gpu.busy_us),
        gpu_anchor=gpu.anchor,
        gpu_before_trace=gpu.before_trace,
    )
    spans = fused_rows(ctx, gpu, compiled) if compiled is not None and compiled.spans else {}
    if labels is not None and labels.spans:
        spans = {**spans, **label_fused_rows(ctx, labels, gpu.work, gpu.node, gpu.pass_code)}
    return module_ops.with_modules(rows, spans) if spans else rows


def fused_rows(ctx: Context, gpu: GpuWork, compiled: CompiledWork) -> dict[tuple[str, int, str, str], str]:
    """(kind, node, pass, name) of the op and kernel rows of kernels fused across modules ->
    the modules they span."""
    ev = ctx.trace.events
    fused = compiled.events[compiled.span >= 0]
    span = compiled.span[compiled.span >= 0]
    keep = ctx.in_selection(ev.ts[fused])
    fused, span = fused[keep], span[keep]
    node, _, phase = ctx.classify(fused)
    out: dict[tuple[str, int, str, str], str] = {}
    # and the FLOPs of their ops in the modules of those ops
    shared = compiled.shares.span >= 0
    share_event = compiled.shares.event[shared]
    in_step = ctx.in_selection(ev.ts[share_event])
    share_event = share_event[in_step]
    _, _, share_phase = ctx.classify(share_event)
    rows = np.concatenate(
        [
            np.stack([node, phase, ev.name[fused], span], axis=1),
            np.stack(
                [
                    compiled.shares.node[shared][in_step],
                    share_phase,
                    ev.name[share_event],
                    compiled.shares.span[shared][in_step],
                ],
                axis=1,
            ),
        ]
    )
    for nd, ph, name, sp in np.unique(rows, axis=0).tolist():
        out[(OpKind.OP.value, nd, PASS_VALUES[ph], ev.names[name])] = compiled.spans[sp]
    # the GPU kernels launched inside them
    anchor = np.maximum(gpu.anchor, 0)
    inside = (gpu.anchor >= 0) & compiled.event_fused[anchor]
    if inside.any():
        is_fused = np.zeros(len(ev), bool)
        is_fused[fused] = True
        around = ctx.links.nearest(is_fused)[anchor[inside]]
        span_of = dict(zip(fused.tolist(), span.tolist()))
        has = around >= 0
        rows = np.stack(
            [gpu.node[inside][has], gpu.pass_code[inside][has], ev.name[gpu.work[inside][has]], around[has]],
            axis=1,
        )
        for nd, ph, name, at in np.unique(rows, axis=0).tolist():
            out[(OpKind.KERNEL.value, nd, PASS_VALUES[ph], ev.names[name])] = compiled.spans[span_of[at]]
    return out


@gives_memory_back
def first_step_timeline(
    ctx: Context,
    parent: np.ndarray,
    paths: list[tuple[str, ...]],
    cpu: CpuTime,
    gpu: GpuWork,
    memory: SelectedMemory,
    memory_device: str | None,
    compiled: CompiledWork | None = None,
    lifetimes: tuple[Lifetimes, BackwardSpans] | None = None,
) -> Timeline | None:
    """The timeline of the first selected step (the whole trace when it has no steps) and
    its memory curve (traceprof.analysis.step_timeline); with ``compiled``, the kernels of
    compiled graphs on the module lanes, in the modules the compiled-kernel table gives them;
    with ``lifetimes`` (and the backward passes), the curve's blocks by category and module."""
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
    depth = node_depths(parent)
    mem = None
    if len(memory.keep):
        mem = step_timeline.StepEvents(np.flatnonzero(memory.keep), memory.node, memory.pass_code)
    return step_timeline.build_timeline(
        ctx.trace,
        ctx.links,
        window=window,
        step=number,
        tree=step_timeline.TimelineTree(
            scope_mask=ctx.tree.scope_mask,
            node_of_scope=ctx.tree.node_of_scope,
            recompute_mask=ctx.tree.recompute_mask,
            n_modules=len(ctx.tree.nodes),
            depth_of=depth,
            path_of=paths,
            scope_labels=scope_labels(ctx.trace, ctx.tree),
        ),
        cpu=step_timeline.StepEvents(cpu.events, cpu.node, cpu.pass_code),
        gpu=step_timeline.StepEvents(gpu.work, gpu.node, gpu.pass_code, launch_times(ev, gpu)),
        memory=mem,
        memory_device=memory_device,
        compiled=_compiled_lanes(ctx, parent, compiled) if compiled is not None else None,
        memory_blocks=None
        if lifetimes is None
        else memory_holders.step_blocks(ctx, memory, *lifetimes, memory_device, window),
    )


def _compiled_lanes(ctx: Context, parent: np.ndarray, compiled: CompiledWork) -> step_timeline.StepEvents:
    """The compiled graphs' kernel events as module lane events: each kernel in the module the
    table gives it and in every ancestor the table made (no scope of its own draws it), in the
    pass of its graph (0 forward, 1 backward)."""
    events, node = compiled.events, compiled.node
    phase = compiled.backward.astype(np.int64)
    parts = [(events, node, phase)]
    made = np.zeros(len(parent) + 1, bool)
    made[: len(compiled.created)] = compiled.created
    up = np.where(node >= 0, parent[np.maximum(node, 0)], -1)
    while True:
        keep = (up >= 0) & made[up]
        if not keep.any():
            break
        events, up, phase = events[keep], up[keep], phase[keep]
        parts.append((events, up, phase))
        up = parent[up]
    return step_timeline.StepEvents(
        np.concatenate([p[0] for p in parts]),
        np.concatenate([p[1] for p in parts]),
        np.concatenate([p[2] for p in parts]),
    )


def launch_times(ev: EventTable, gpu: GpuWork) -> np.ndarray:
    """The trace time of each GPU work item's launch (its anchor's start; its own start when
    it has no anchor): the time that places it in a step, as in traceprof.analysis.gpu_work."""
    times: np.ndarray = np.where(gpu.anchor >= 0, ev.ts[np.maximum(gpu.anchor, 0)], ev.ts[gpu.work])
    return times

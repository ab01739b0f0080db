"""The stages that keep per-event detail, fed with the attributed events.

Receives the :class:`~traceprof.analysis.classify.Context` and the attributed CPU slices, GPU
work, counted ops and ``[memory]`` events (node and pass set, groups included) and returns what
:mod:`traceprof.analysis.module_ops` and :mod:`traceprof.analysis.step_timeline` make of them:
:func:`node_ops` each node's own ops and kernels, :func:`first_step_timeline` the timeline of
the first selected step.
"""

from __future__ import annotations

import numpy as np

from traceprof.analysis import module_ops, step_timeline
from traceprof.analysis.classify import Context
from traceprof.analysis.counted_ops import Ops
from traceprof.analysis.cpu_time import CpuTime
from traceprof.analysis.gpu_work import GpuWork
from traceprof.analysis.memory_events import SelectedMemory
from traceprof.analysis.op_costs import OpCosts
from traceprof.analysis.stage import gives_memory_back
from traceprof.analysis.unattributed import Groups
from traceprof.result.model import OpStat
from traceprof.result.timeline import Timeline


@gives_memory_back
def node_ops(
    ctx: Context, groups: Groups, cpu: CpuTime, gpu: GpuWork, counted: Ops, costs: OpCosts
) -> list[tuple[OpStat, ...]]:
    """Each node's own ops and kernels per pass (traceprof.analysis.module_ops)."""
    return module_ops.ops_by_node(
        ctx.trace,
        ctx.links,
        ctx.tree.scope_mask,
        ctx.is_step,
        groups.n_nodes,
        ctx.n_steps,
        cpu=module_ops.Attributed(cpu.events, cpu.node, cpu.pass_code, cpu.exclusive_us),
        counted=module_ops.Attributed(
            counted.events, counted.node, counted.pass_code, costs.flops[counted.keep]
        ),
        gpu=module_ops.Attributed(gpu.work, gpu.node, gpu.pass_code, gpu.busy_us),
        gpu_anchor=gpu.anchor,
    )


@gives_memory_back
def first_step_timeline(
    ctx: Context,
    parent: np.ndarray,
    paths: list[tuple[str, ...]],
    cpu: CpuTime,
    gpu: GpuWork,
    memory: SelectedMemory,
    memory_device: str | None,
) -> Timeline | None:
    """The timeline of the first selected step (the whole trace when it has no steps) and
    its memory curve (traceprof.analysis.step_timeline)."""
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
        mem = step_timeline.StepEvents(np.flatnonzero(memory.keep), memory.node, memory.pass_code)
    return step_timeline.build_timeline(
        ctx.trace,
        ctx.links,
        window=window,
        step=number,
        scope_mask=ctx.tree.scope_mask,
        node_of_scope=ctx.tree.node_of_scope,
        recompute_mask=ctx.tree.recompute_mask,
        n_modules=len(ctx.tree.nodes),
        depth_of=depth,
        path_of=paths,
        cpu=step_timeline.StepEvents(cpu.events, cpu.node, cpu.pass_code),
        gpu=step_timeline.StepEvents(gpu.work, gpu.node, gpu.pass_code),
        memory=mem,
        memory_device=memory_device,
    )

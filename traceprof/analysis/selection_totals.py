"""Totals of the whole selection: the profile's StepSelection and LinkStats.

:func:`step_selection` receives the :class:`~traceprof.analysis.classify.Context`, the
attributed CPU slices, GPU work and ops and returns the selected steps with the totals of the
selection per step (what the tree's nodes add up to); :func:`link_stats` receives the trace and
its links and returns how much of it the linker joined.
"""

from __future__ import annotations

import numpy as np

from traceprof.analysis.classify import Context
from traceprof.analysis.counted_ops import Ops
from traceprof.analysis.cpu_time import CpuTime
from traceprof.analysis.gpu_work import GpuWork
from traceprof.analysis.link import Links
from traceprof.analysis.op_costs import OpCosts
from traceprof.analysis.stage import gives_memory_back
from traceprof.result.model import LinkStats, StepSelection
from traceprof.trace.columns import Trace
from traceprof.trace.schema import Kind


def step_selection(
    ctx: Context, cpu: CpuTime, gpu: GpuWork, counted: Ops, unsupported: Ops, costs: OpCosts
) -> StepSelection:
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


@gives_memory_back
def link_stats(trace: Trace, links: Links) -> LinkStats:
    """How many events, GPU work items and backward nodes the linker joined."""
    ev = trace.events
    bwd_nodes = np.flatnonzero(links.backward_node == np.arange(len(ev), dtype=links.backward_node.dtype))
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

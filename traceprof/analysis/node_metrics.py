"""Per-node sums: each node's own value of every metric per pass, its calls, and subtree totals.

:func:`own_metrics` receives the attributed CPU slices, GPU work and ops (their node already
set, groups included) and returns ``own[metric][pass, node]``, the mean per selected step;
:func:`calls` returns each module node's calls per step; :func:`subtree_totals` adds each node's
descendants to it.
"""

from __future__ import annotations

import numpy as np

from traceprof.analysis.classify import Context
from traceprof.analysis.counted_ops import Ops
from traceprof.analysis.cpu_time import CpuTime
from traceprof.analysis.gpu_work import GpuWork
from traceprof.analysis.op_costs import OpCosts
from traceprof.analysis.stage import gives_memory_back
from traceprof.result.model import PASSES


@gives_memory_back
def own_metrics(
    ctx: Context, n_nodes: int, cpu: CpuTime, gpu: GpuWork, counted: Ops, unsupported: Ops, costs: OpCosts
) -> dict[str, np.ndarray]:
    """Each node's own value of every metric, per pass: own[metric][pass, node], per step."""

    def sums(node: np.ndarray, phase: np.ndarray, weights: np.ndarray) -> np.ndarray:
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
        "unsupported_ops": sums(unsupported.node, unsupported.pass_code, np.ones(len(unsupported.events))),
    }


def calls(ctx: Context, n_nodes: int) -> np.ndarray:
    """Calls of each node: its forward scope events in the selection, per step."""
    tree, ev = ctx.tree, ctx.trace.events
    scope_events = np.flatnonzero(tree.scope_mask & ~tree.recompute_mask)
    scope_events = scope_events[ctx.in_selection(ev.ts[scope_events])]
    return np.bincount(tree.node_of_scope[scope_events], minlength=n_nodes)[:n_nodes] / ctx.n_steps


def subtree_totals(own: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """own[phase, node] summed over each node's subtree."""
    total: np.ndarray = own.copy()
    depth = np.zeros(len(parent), np.int64)
    for i in range(len(parent)):  # parents precede children in creation order
        if parent[i] >= 0:
            depth[i] = depth[parent[i]] + 1
    for i in np.argsort(-depth, kind="stable"):
        if parent[i] >= 0:
            total[:, parent[i]] += total[:, i]
    return total

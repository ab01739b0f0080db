"""Per-node sums: each node's own value of every metric per pass, its calls, and subtree totals.

:func:`own_metrics` receives the attributed CPU slices, GPU work and ops (their node already
set, groups included) and returns ``own[metric][pass, node]``, the mean per selected step;
:func:`calls` returns each module node's calls per step; :func:`subtree_totals_of` adds each node's
descendants to it.
"""

from __future__ import annotations

import numpy as np

from traceprof.analysis.classify import Context
from traceprof.analysis.compiled import CompiledWork
from traceprof.analysis.counted_ops import Ops
from traceprof.analysis.cpu_time import CpuTime
from traceprof.analysis.gpu_work import GpuWork
from traceprof.analysis.kernel_labels import LabelWork, label_calls
from traceprof.analysis.op_costs import OpCosts
from traceprof.analysis.stage import gives_memory_back
from traceprof.analysis.tree_levels import bottom_up_levels
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
        "gpu_kernel_us": sums(gpu.node, gpu.pass_code, kernel_time(ev.ts[gpu.work], ev.dur[gpu.work], gpu)),
    }


def kernel_time(start: np.ndarray, dur: np.ndarray, gpu: GpuWork) -> np.ndarray:
    """Per GPU work item: the part of its interval that no earlier-starting item of the same
    node and pass already covers, so that the items of a (node, pass) add up to the union of
    their intervals: the time the node's work really ran, whatever other nodes ran beside it.
    Vectorized: the items sorted by (node, pass, start), each group's running maximum of the
    ends taken over end ranks offset by the group."""
    n = len(start)
    out = np.zeros(n)
    if n == 0:
        return out
    start = np.nan_to_num(start)
    end = start + np.nan_to_num(np.maximum(dur, 0.0))
    group = gpu.node.astype(np.int64) * len(PASSES) + gpu.pass_code
    order = np.lexsort((start, group))
    g, s, e = group[order], start[order], end[order]
    # running max of the ends within each group: on end ranks, each group above the last
    ends_sorted = np.sort(e)
    rank = np.searchsorted(ends_sorted, e).astype(np.int64)
    first = np.concatenate([[True], g[1:] != g[:-1]])
    offset = np.cumsum(first) * (n + 1)
    reach = np.maximum.accumulate(rank + offset)
    # the furthest end reached by the group's earlier items (none before a group's first item)
    before = np.concatenate([[0], reach[:-1]]) - offset
    covered_to = np.where(first, -np.inf, ends_sorted[np.clip(before, 0, n - 1)])
    out[order] = np.maximum(e - np.maximum(s, covered_to), 0.0)
    return out


def calls(
    ctx: Context, n_nodes: int, compiled: CompiledWork | None = None, labels: LabelWork | None = None
) -> np.ndarray:
    """Calls of each node: its forward scope events in the selection, per step; for a node made
    from the compiled-kernel table (no scope), the forward graph runs that ran its kernels or
    its descendants'; for one made from kernel labels, the forward runs (compiled regions,
    graph launches) that ran its labelled work or its descendants'; for a group node of a
    compiled graph or a replayed graph (analysis.compiled_regions), the runs of its regions or
    its launches (families: none)."""
    tree, ev = ctx.tree, ctx.trace.events
    scope_events = np.flatnonzero(tree.scope_mask & ~tree.recompute_mask)
    scope_events = scope_events[ctx.in_selection(ev.ts[scope_events])]
    out: np.ndarray = np.bincount(tree.node_of_scope[scope_events], minlength=n_nodes)[:n_nodes] / ctx.n_steps
    if compiled is not None:
        made = compiled.created & ~compiled.container
        out[: len(made)][made] = compiled_calls(ctx, compiled)[made]
    if labels is not None:
        made = labels.created & ~labels.container
        out[: len(made)][made] = label_calls(ctx, labels)[made]
    if tree.call_node is not None:  # group nodes: the runs of their graph (a region, a launch)
        runs = np.flatnonzero(tree.call_node >= 0)
        runs = runs[ctx.in_selection(ev.ts[runs])]
        out += np.bincount(tree.call_node[runs], minlength=n_nodes)[:n_nodes] / ctx.n_steps
    return out


def compiled_calls(ctx: Context, compiled: CompiledWork) -> np.ndarray:
    """Per tree node: the forward graph runs of the selection that ran a kernel of the node or
    of its descendants, per step."""
    n = len(compiled.created)
    parent = np.array([hn.parent for hn in ctx.tree.nodes], np.int64)
    ts = ctx.trace.events.ts
    # (run, node) of every kernel event and of every FLOP share (a module whose ops are all
    # fused into another module's kernels ran too)
    keep = ~compiled.backward & ctx.in_selection(ts[compiled.run])
    share = ~compiled.shares.backward & ctx.in_selection(ts[compiled.shares.run])
    pairs = np.unique(
        np.stack(
            [
                np.concatenate([compiled.run[keep], compiled.shares.run[share]]),
                np.concatenate([compiled.node[keep], compiled.shares.node[share]]),
            ],
            axis=1,
        ),
        axis=0,
    )
    seen = [pairs]
    while len(pairs):  # their ancestors, a level at a time
        up = parent[pairs[:, 1]]
        pairs = np.unique(np.stack([pairs[up >= 0, 0], up[up >= 0]], axis=1), axis=0)
        seen.append(pairs)
    every = np.unique(np.concatenate(seen), axis=0)  # a run counts once per node
    return np.bincount(every[:, 1], minlength=n)[:n] / ctx.n_steps


@gives_memory_back
def fused_metrics(
    ctx: Context,
    n_nodes: int,
    cpu: CpuTime,
    gpu: GpuWork,
    compiled: CompiledWork | None,
    labels: LabelWork | None = None,
) -> dict[str, np.ndarray]:
    """Each node's own work of kernels fused across modules (Fused), per pass, per step: the
    metrics of own_metrics that a fused kernel's time gives (FUSED_FIELDS): kernels the
    compiled-kernel table joined to several modules' nodes, and GPU work whose kernel label
    names several modules."""

    def sums(node: np.ndarray, phase: np.ndarray, weights: np.ndarray, mask: np.ndarray) -> np.ndarray:
        out = np.zeros((len(PASSES), n_nodes))
        for ph in range(len(PASSES)):
            m = mask & (phase == ph)
            out[ph] = np.bincount(node[m], weights=weights[m], minlength=n_nodes)[:n_nodes]
        return out / ctx.n_steps

    ev = ctx.trace.events
    if compiled is not None:
        on_cpu = compiled.event_fused[cpu.events]
        on_gpu = (gpu.anchor >= 0) & compiled.event_fused[np.maximum(gpu.anchor, 0)]
    else:
        on_cpu, on_gpu = np.zeros(len(cpu.events), bool), np.zeros(len(gpu.work), bool)
    if labels is not None:
        on_gpu = on_gpu | labels.fused[gpu.work]
    return {
        "gpu_busy_us": sums(gpu.node, gpu.pass_code, gpu.busy_us, on_gpu),
        "gpu_work_us": sums(gpu.node, gpu.pass_code, ev.dur[gpu.work], on_gpu),
        "cpu_us": sums(cpu.node, cpu.pass_code, cpu.exclusive_us, on_cpu),
        "kernels": sums(gpu.node, gpu.pass_code, gpu.is_kernel, on_gpu),
    }


def subtree_totals_of(own: dict[str, np.ndarray], parent: np.ndarray) -> dict[str, np.ndarray]:
    """Each metric's own[pass, node] summed over each node's subtree, all metrics at once.

    The children are added to their parents a depth level at a time, deepest first, with
    ``np.add.at`` (unbuffered: a parent's children are added one after the other, by
    ascending index): the sums of a node-by-node loop over the nodes by descending depth,
    to the last bit."""
    if not own:
        return {}
    stacked = np.concatenate([np.asarray(v, np.float64) for v in own.values()])  # [metric * pass, node]
    by_node = stacked.T  # a view with the node first
    for level in bottom_up_levels(parent):
        np.add.at(by_node, parent[level], by_node[level])
    rows = np.cumsum([0, *(len(v) for v in own.values())]).tolist()
    return {k: stacked[lo:hi] for k, lo, hi in zip(own, rows, rows[1:])}

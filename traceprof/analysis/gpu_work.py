"""GPU work attribution: kernels, memcpys and memsets of the selection, through their launch.

A GPU work item belongs to the step holding its launch (its own start when it has no launch in
the trace) and goes where its anchor, the CPU event it is attributed through (see
:mod:`traceprof.analysis.link`), goes. :func:`gpu_work` receives the
:class:`~traceprof.analysis.classify.Context` and returns :class:`GpuWork`: each item of the
selection with its anchor, node, pass, share of the device's busy time, and whether its launch
is missing from the trace.
"""

from __future__ import annotations

import msgspec
import numpy as np

from traceprof.analysis.classify import Context
from traceprof.analysis.stage import gives_memory_back
from traceprof.trace.columns import EventTable, unique
from traceprof.trace.schema import Kind


class GpuWork(msgspec.Struct):
    """GPU work items in the selection (by the time of their launch), and where they go."""

    work: np.ndarray
    anchor: np.ndarray  # the CPU event each item is attributed through (-1: none)
    node: np.ndarray
    pass_code: np.ndarray
    busy_us: np.ndarray  # share of the device's busy time
    no_launch: np.ndarray
    before_trace: np.ndarray  # launched before the profiler's CPU window opened
    is_kernel: np.ndarray  # 1.0 for kernels, 0.0 for memcpy/memset


@gives_memory_back
def gpu_work(ctx: Context) -> GpuWork:
    """GPU work in the selection: its busy-time share, its anchor's node and pass, and whether
    its launch is missing from the trace."""
    ev, links = ctx.trace.events, ctx.links
    work = links.gpu_work
    anchor = links.anchor
    when = np.where(anchor >= 0, ev.ts[np.maximum(anchor, 0)], ev.ts[work])
    keep = ctx.in_selection(when)
    work, anchor = work[keep], anchor[keep]
    node, bwd, pass_code = ctx.classify(anchor)
    if ctx.tree.work_node is not None:  # kernels of graph replays, labelled kernels: their own nodes
        forced = ctx.tree.work_node[keep]
        moved = forced >= 0
        # a moved item keeps the pass of its launch's node (a graph launched inside a
        # ``## backward ##`` annotation stays backward work); one launched in no node takes
        # the pass of its new node
        kept = moved & (node >= 0)
        node = np.where(moved, forced, node).astype(node.dtype, copy=False)
        pass_code = np.where(kept, pass_code, ctx.pass_codes(anchor, node, bwd)).astype(np.int8)
    busy = shared_busy_time(ev, work)
    # work without a launch in the trace: launched before the trace began when its correlation
    # id is below every launch's in the trace (the profiler's CPU window opened later)
    launch_corr = ev.correlation[(ev.kind == Kind.RUNTIME) & (ev.correlation >= 0)]
    first_launch = launch_corr.min() if len(launch_corr) else -1
    no_launch = anchor < 0
    before_trace = no_launch & (ev.correlation[work] >= 0) & (ev.correlation[work] < first_launch)
    is_kernel = (ev.kind[work] == Kind.KERNEL).astype(np.float64)
    return GpuWork(work, anchor, node, pass_code, busy, no_launch, before_trace, is_kernel)


def shared_busy_time(ev: EventTable, work: np.ndarray) -> np.ndarray:
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

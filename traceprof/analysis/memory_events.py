"""Memory hookup: the ``[memory]`` events of the selection, attributed to nodes and passes.

Each ``[memory]`` instant goes where the innermost CPU slice around it goes, classified as CPU
time is (outside the modules: that slice's "not in any module" group; no slice around it: the
bucket). :func:`memory_events` receives the :class:`~traceprof.analysis.classify.Context` and
the :class:`~traceprof.analysis.unattributed.Groups` and returns :class:`SelectedMemory`, which
:func:`traceprof.analysis.memory.memory_by_node` sums per node; :func:`memory_device` picks the
device the report shows from those sums.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from traceprof.analysis.classify import Context
from traceprof.analysis.memory import enclosing_slice
from traceprof.analysis.stage import gives_memory_back
from traceprof.analysis.unattributed import Groups
from traceprof.result.memory import MemoryUse
from traceprof.trace import schema
from traceprof.trace.columns import Trace


class SelectedMemory(msgspec.Struct):
    """[memory] events in the selection (``keep``), their node and pass; and of every memory
    event of the trace (selected or not), what the lifetimes of its block need: its pass, and
    whether it was made under the optimizer's step or by a module re-run in the backward."""

    keep: np.ndarray
    node: np.ndarray
    pass_code: np.ndarray
    row_pass: np.ndarray = msgspec.field(default_factory=lambda: np.zeros(0, np.int8))
    row_optimizer: np.ndarray = msgspec.field(default_factory=lambda: np.zeros(0, bool))
    row_recomputed: np.ndarray = msgspec.field(default_factory=lambda: np.zeros(0, bool))


@gives_memory_back
def memory_events(ctx: Context, groups: Groups) -> SelectedMemory:
    """[memory] events: the innermost CPU slice around each, then attributed like CPU time."""
    trace, links = ctx.trace, ctx.links
    memory = trace.memory
    if memory is None or not len(memory):
        return SelectedMemory(np.zeros(0, bool), np.zeros(0, np.int64), np.zeros(0, np.int8))
    keep = ctx.in_selection(trace.events.ts[memory.event])
    around = enclosing_slice(
        trace,
        links.nest_end,
        links.parent,
        np.flatnonzero(links.depth >= 0).astype(links.parent.dtype),
        memory.event,
    )
    if ctx.tree.event_node is not None:
        around = _kernel_after(
            trace.events.ts, links.parent, ctx.tree.event_node, around, trace.events.ts[memory.event]
        )
    node_all, _, pass_all = ctx.classify(around)
    node, pass_code, kept_around = node_all[keep], pass_all[keep], around[keep]
    outside = (node < 0) & (kept_around >= 0)
    node[outside] = groups.of(kept_around[outside])
    node[node < 0] = groups.bucket  # no slice around it at all
    has = around >= 0
    row_optimizer = np.zeros(len(around), bool)  # outside the modules only
    outside_all = np.flatnonzero(has & (node_all < 0))
    row_optimizer[outside_all] = _under_optimizer(trace, links.parent, around[outside_all])
    scope = np.where(has, ctx.scope_of[np.maximum(around, 0)], -1)
    row_recomputed = (scope >= 0) & ctx.tree.recompute_mask[np.maximum(scope, 0)]
    return SelectedMemory(keep, node, pass_code, pass_all, row_optimizer, row_recomputed)


def _kernel_after(
    ts: np.ndarray, parent: np.ndarray, event_node: np.ndarray, around: np.ndarray, t: np.ndarray
) -> np.ndarray:
    """Memory events made by a compiled graph's wrapper between its kernel calls (the buffers
    Inductor allocates for the kernel it calls next, and frees after the last reader): each
    goes with the first kernel call of the same wrapper that starts at or after it and that the
    compiled-kernel table gave a module (``event_node``), else stays on the wrapper."""
    out: np.ndarray = around.copy()
    loose = np.flatnonzero((around >= 0) & (event_node[np.maximum(around, 0)] < 0))
    if not len(loose):
        return out
    calls = np.flatnonzero(event_node >= 0)
    calls = calls[(parent[calls] >= 0) & (event_node[np.maximum(parent[calls], 0)] < 0)]
    if not len(calls):
        return out
    # one sorted key per call: its wrapper, then its start's rank among every start
    starts = np.sort(ts[calls])
    width = len(starts) + 1
    rank = np.searchsorted(starts, ts[calls], side="left")
    keys = parent[calls].astype(np.int64) * width + rank
    order = np.argsort(keys, kind="stable")
    keys, calls = keys[order], calls[order]
    wrapper = around[loose].astype(np.int64)
    query = wrapper * width + np.searchsorted(starts, t[loose], side="left")
    pos = np.searchsorted(keys, query, side="left")
    found = pos < len(keys)
    found[found] = parent[calls[pos[found]]] == wrapper[found]
    out[loose[found]] = calls[pos[found]]
    return out


def _under_optimizer(trace: Trace, parent: np.ndarray, slices: np.ndarray) -> np.ndarray:
    """Whether each slice (-1: none) is an optimizer step's or inside one (its annotation, a
    foreach or fused update op) at any depth: the Python frames of with_stack traces come
    between the annotation and the ops. Climbs the slices' ancestors a level at a time."""
    ev = trace.events
    named = np.fromiter((n.startswith(schema.OPTIMIZER_STEP_PREFIXES) for n in ev.names), bool, len(ev.names))
    found = np.zeros(len(slices), bool)
    at = slices.astype(np.int64)
    live = np.flatnonzero(at >= 0)
    while len(live):
        cur = at[live]
        found[live] |= named[ev.name[cur]]
        at[live] = parent[cur]
        live = live[(at[live] >= 0) & ~found[live]]
    return found


def memory_device(memory_use: Sequence[Sequence[MemoryUse]]) -> str | None:
    """The device whose memory the report shows: the first accelerator with events, else the
    first device (the CPU)."""
    seen = list(dict.fromkeys(m.device for uses in memory_use for m in uses))
    accelerators = [d for d in seen if d != "cpu"]
    return accelerators[0] if accelerators else (seen[0] if seen else None)

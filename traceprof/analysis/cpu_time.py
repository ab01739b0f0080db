"""CPU time attribution: the exclusive time of every CPU slice in the selection.

:func:`cpu_time` receives the :class:`~traceprof.analysis.classify.Context` and returns
:class:`CpuTime`: each slice of the selected steps with its exclusive time (its span less its
children's) and the node and pass it goes to, as the slice itself is classified.
"""

from __future__ import annotations

import msgspec
import numpy as np

from traceprof.analysis.classify import Context
from traceprof.analysis.stage import gives_memory_back


class CpuTime(msgspec.Struct):
    """Exclusive time of every CPU slice in the selection, and where it goes."""

    events: np.ndarray
    exclusive_us: np.ndarray
    node: np.ndarray
    pass_code: np.ndarray


@gives_memory_back
def cpu_time(ctx: Context) -> CpuTime:
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
    return CpuTime(cpu, cpu_excl, node, pass_code)

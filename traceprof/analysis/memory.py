"""Memory per module from ``[memory]`` events (traces taken with ``profile_memory=True``).

Each ``[memory]`` instant is an allocation (``Bytes`` > 0) or a free (``Bytes`` < 0) made on the
thread it is recorded on, on one device, with the allocator's total after it (``Total
Allocated``; traces before 2022 lack it). An event belongs to the innermost CPU slice around it
on its thread, and through that slice to a module and a pass exactly as CPU time does
(``classify.classify_events``): a backward op's memory goes to the module of the forward op that
created it.

Per node, pass and device: bytes allocated and bytes freed inside the node and everything below
it (per step), and the peak, the highest allocator total seen at any of those events (all steps
of the selection). The peak is read at allocations and frees only, so it is the peak of the
device's total while the module ran, as far as the module's own events show it.
"""

from __future__ import annotations

import numpy as np

from traceprof.analysis.tree_levels import bottom_up_levels, parents_first
from traceprof.result.memory import MemoryPhase, MemoryUse
from traceprof.trace.columns import Trace, unique

N_PASSES = 3  # forward, backward, other: the order of profile.PASSES


def enclosing_slice(
    trace: Trace, nest_end: np.ndarray, parent: np.ndarray, cpu: np.ndarray, events: np.ndarray
) -> np.ndarray:
    """For each event (an instant), the innermost CPU slice of ``cpu`` around it on its thread
    (``ts`` within ``[start, end]``), or -1."""
    ev = trace.events
    out = np.full(len(events), -1, parent.dtype)
    if not len(events) or not len(cpu):
        return out
    for thread in unique(ev.thread[events]).tolist():
        mine = events[ev.thread[events] == thread]
        slices = cpu[ev.thread[cpu] == thread]
        if not len(slices):
            continue
        starts = ev.ts[slices]
        order = np.argsort(starts, kind="stable")
        slices, starts = slices[order], starts[order]
        del order
        t = ev.ts[mine]
        pos = np.searchsorted(starts, t, side="right") - 1
        del starts
        cand = np.where(pos >= 0, slices[np.maximum(pos, 0)], -1)
        # climb out of slices that ended before the event; each step goes one level up
        while True:
            ended = (cand >= 0) & (nest_end[np.maximum(cand, 0)] < t)
            if not ended.any():
                break
            cand[ended] = parent[cand[ended]]
        out[np.flatnonzero(ev.thread[events] == thread)] = cand
    return out


def memory_by_node(
    trace: Trace,
    keep: np.ndarray,
    node: np.ndarray,
    phase: np.ndarray,
    parent: np.ndarray,
    n_steps: int,
    activation: np.ndarray | None = None,
) -> list[tuple[MemoryUse, ...]]:
    """Per node (index of ``parent``), its memory use per device, devices with events only.

    ``keep``: which memory events are in the selection; ``node``/``phase``: the node and pass
    (0 forward, 1 backward, 2 other) of each kept event (as for CPU time); ``parent``: the tree;
    ``activation``: per device and node, the bytes per step of the node's own activations
    (analysis.memory_holders; None: not known).
    """
    mem = trace.memory
    n_nodes = len(parent)
    empty: list[tuple[MemoryUse, ...]] = [() for _ in range(n_nodes)]
    if mem is None or not len(mem):
        return empty
    if not keep.any():
        return empty
    nbytes = mem.bytes[keep].astype(np.float64)
    total = mem.total_allocated[keep]
    device = mem.device[keep]
    has_total = bool((total >= 0).any())
    if parents_first(parent):
        levels = bottom_up_levels(parent)
    else:  # the children-first order of every node, one at a time
        levels = [np.array([i]) for i in _children_first(parent) if parent[i] >= 0]

    # (label, [pass, metric, node], own activations per node or None)
    per_device: list[tuple[str, np.ndarray, np.ndarray | None]] = []
    for d, label in enumerate(mem.devices):
        on = device == d
        if not on.any():
            continue
        table = np.zeros((N_PASSES, 5, n_nodes))  # allocated, freed, peak, events, activations
        table[:, 2, :] = -1
        own_activation = None
        if activation is not None:  # in the forward's row (a sum: carried up with the others)
            table[0, 4] = own_activation = activation[d, :n_nodes]
        for ph in range(N_PASSES):
            m = on & (phase == ph)
            nd = node[m]
            b = nbytes[m]
            table[ph, 0] = np.bincount(nd, weights=np.maximum(b, 0), minlength=n_nodes)[:n_nodes]
            table[ph, 1] = np.bincount(nd, weights=np.maximum(-b, 0), minlength=n_nodes)[:n_nodes]
            table[ph, 3] = np.bincount(nd, minlength=n_nodes)[:n_nodes]
            np.maximum.at(table[ph, 2], nd, total[m].astype(np.float64))
        _carry_up(table, parent, levels)
        per_device.append((label, table, own_activation))

    result: list[list[MemoryUse]] = [[] for _ in range(n_nodes)]
    for label, table, own_activation in per_device:
        # the nodes with events on the device (counts: exact sums), their values per pass
        with_events = np.flatnonzero(table[:, 3, :].sum(axis=0) != 0)
        sums = (table[:, (0, 1, 3)][:, :, with_events] / n_steps).transpose(2, 0, 1).tolist()
        peaks = table[:, 2, with_events].T.tolist()
        if own_activation is None:
            activations = [(None, None)] * len(with_events)
        else:
            activations = list(zip(table[0, 4, with_events].tolist(), own_activation[with_events].tolist()))
        for i, node_sums, node_peaks, (act, own_act) in zip(with_events.tolist(), sums, peaks, activations):
            phases = [
                MemoryPhase(
                    allocated_bytes=allocated,
                    freed_bytes=freed,
                    peak_bytes=int(peak) if has_total and peak >= 0 else None,
                    events=events,
                )
                for (allocated, freed, events), peak in zip(node_sums, node_peaks)
            ]
            forward, backward, other = phases
            result[i].append(MemoryUse(label, forward, backward, other, act, own_act))
    return [tuple(uses) for uses in result]


def _carry_up(table: np.ndarray, parent: np.ndarray, levels: list[np.ndarray]) -> None:
    """Adds each node's sums (allocated, freed, events, activations) to its parent's and takes the larger
    peak, a level of nodes at a time from the deepest (``np.add.at`` adds a parent's
    children one after the other, as a node-by-node loop does)."""
    sums = table[:, (0, 1, 3, 4)]  # a copy: written back below
    by_node = np.moveaxis(sums, -1, 0)  # views with the node first: [node, ...]
    peak = table[:, 2].T
    for level in levels:
        up = parent[level]
        np.add.at(by_node, up, by_node[level])
        np.maximum.at(peak, up, peak[level])
    table[:, (0, 1, 3, 4)] = sums


def _children_first(parent: np.ndarray) -> list[int]:
    """Node indices ordered so that every node comes before its parent."""
    depth = np.full(len(parent), -1, np.int64)
    for i in range(len(parent)):
        path = []
        j = i
        while j >= 0 and depth[j] < 0:
            path.append(j)
            j = int(parent[j])
        base = depth[j] if j >= 0 else -1
        for k in reversed(path):
            base += 1
            depth[k] = base
    order: list[int] = np.argsort(-depth, kind="stable").tolist()
    return order

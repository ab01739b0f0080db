"""The timeline of one step: what ran when, on which lane, for which module; and the device's
allocated memory over the step.

A stage of attribution: it receives the step's events already attributed to nodes and passes
and keeps, for one step (the first of the selection; the whole trace when it has no steps):

- **lanes**: the module scopes of the forward (one row per nesting level), the backward node
  ops at the depth of the module they belong to, each CPU thread (slices down to
  :data:`CPU_DEPTH` levels), each GPU stream (kernels, memcpy, memset, by the module that
  launched them): the work *launched* in the step, so the span runs on to the end of the last
  of it when the device lags the CPU;
- **memory**: the allocator's total on the profile's memory device at each ``[memory]`` event,
  with the peak and the module (and pass) whose event reached it.

**Bounded.** A trace of many tiny events would make a page slow, so: on each lane row, runs of
consecutive events shorter than ``span / MERGE_FRACTION`` (a pixel at 4,000 px across), of the
same module and pass and closer than that to each other, become one event that counts them
(``count``); then, past :data:`MAX_EVENTS`, the shortest events are left out (``dropped``).
The memory curve keeps at most :data:`MAX_MEMORY_POINTS` points: the lowest and highest total
of each time bucket, and the peak.

Modules are named by their path (``ModuleNode.path``), so the timeline stays valid for a
profile whose tree was cut or folded (``--depth``, ``--top``): a viewer shows a module under
its closest ancestor still in the tree.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec
import numpy as np
from msgspec.structs import replace

from traceprof.analysis.link import Links
from traceprof.analysis.memory_holders import StepBlocks
from traceprof.result.timeline import (
    MAX_EVENTS,
    MAX_MEMORY_BLOCKS,
    Lane,
    LaneKind,
    MemoryBlocks,
    MemoryCurve,
    Timeline,
)
from traceprof.trace.columns import Trace, unique
from traceprof.trace.model import ThreadInfo

MAX_MEMORY_POINTS = 4_000
MERGE_FRACTION = 4_000
CPU_DEPTH = 4  # CPU slices shown per thread: nesting levels 0 .. CPU_DEPTH - 1


class StepEvents(msgspec.Struct, frozen=True):
    """Attributed events of the selection: event indices, node (attribution ids), pass code;
    ``at``: the trace time that places each event in a step (GPU work: its launch), None: the
    event's own start."""

    events: np.ndarray
    node: np.ndarray
    phase: np.ndarray
    at: np.ndarray | None = None


class TimelineTree(msgspec.Struct, frozen=True):
    """What the timeline reads of the module tree: the scope events (``scope_mask``), the node of
    each (``node_of_scope``), those re-run in a backward pass (``recompute_mask``, activation
    checkpointing: not drawn on the forward lane), the number of module nodes (node ids below it
    are modules), each node's depth and path (attribution's node ids), and the labels of the
    scope events' names (name code -> label, hierarchy.scope_labels; None: their raw names)."""

    scope_mask: np.ndarray
    node_of_scope: np.ndarray
    recompute_mask: np.ndarray
    n_modules: int
    depth_of: np.ndarray
    path_of: list[tuple[str, ...]]
    scope_labels: dict[int, str] | None = None


class _Events(NamedTuple):
    """The timeline's events as parallel arrays: lane, row in the lane, start (from the step's
    start) and duration, name code, node, pass code, and how many events each one stands for."""

    lane: np.ndarray
    row: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    name: np.ndarray
    node: np.ndarray
    phase: np.ndarray
    counts: np.ndarray

    def taken(self, keep: np.ndarray) -> _Events:
        return _Events(*(a[keep] for a in self))


class _Part(NamedTuple):
    """The events of one lane: their rows, event indices, nodes and pass codes."""

    lane: int
    row: np.ndarray
    events: np.ndarray
    node: np.ndarray
    phase: np.ndarray


def build_timeline(
    trace: Trace,
    links: Links,
    *,
    window: tuple[float, float],
    step: int | None,
    tree: TimelineTree,
    cpu: StepEvents,
    gpu: StepEvents,
    memory: StepEvents | None,
    memory_device: str | None,
    compiled: StepEvents | None = None,
    memory_blocks: StepBlocks | None = None,
) -> Timeline:
    """The timeline of the step in ``window`` (trace times). ``cpu`` and ``gpu`` the selection's
    events (they are cut to the window here); ``memory``: its ``[memory]`` events (rows of
    ``trace.memory``), with their node and pass; ``compiled``: kernel events of compiled graphs
    with the module node the compiled-kernel table gives them (and its ancestors made from the
    table), pass 0 forward or 1 backward: drawn on the module lanes as their scopes would be."""
    ev = trace.events
    t0, t1 = window
    lanes, parts = _lanes(trace, links, window, tree, cpu, gpu, compiled)
    idx = _joined([p.events for p in parts])
    found = _Events(
        lane=_joined([np.full(len(p.events), p.lane, np.int64) for p in parts]),
        row=_joined([p.row for p in parts]),
        start=ev.ts[idx] - t0,
        dur=ev.dur[idx],
        name=ev.name[idx].astype(np.int64),
        node=_joined([p.node for p in parts]),
        phase=_joined([p.phase for p in parts]),
        counts=np.ones(len(idx), np.int64),
    )
    end = max(t1, float((ev.ts[idx] + ev.dur[idx]).max()) if len(idx) else t1)
    span = max(end - t0, 1e-3)
    # merge runs of tiny events, then leave out the shortest past MAX_EVENTS
    tiny_us = span / MERGE_FRACTION
    shown = _merge_tiny(found, tiny_us)
    dropped = max(len(shown.lane) - MAX_EVENTS, 0)
    if dropped:
        shown = shown.taken(np.sort(np.argsort(-shown.dur, kind="stable")[:MAX_EVENTS]))
    # modules and names actually used, renumbered
    path_of = tree.path_of
    mod_codes, module = _codes(np.where((shown.node >= 0) & (shown.node < len(path_of)), shown.node, -1))
    name_codes, name = _codes(shown.name)
    curve = _memory_curve(trace, memory, memory_device, t0, path_of, mod_codes)
    if curve is not None and curve[1] >= 0 and curve[1] not in mod_codes:
        mod_codes = mod_codes + [curve[1]]
    mem = None
    if curve is not None:
        mem = _with_peak_module(curve[0], mod_codes.index(curve[1]) if curve[1] >= 0 else -1)
        if memory_blocks is not None:
            mem = replace(mem, blocks=_blocks(memory_blocks, t0, span, len(path_of), mod_codes))
    return Timeline(
        step=step,
        start_us=float(t0),
        span_us=float(span),
        modules=tuple(tuple(path_of[c]) for c in mod_codes),
        names=tuple((tree.scope_labels or {}).get(c, ev.names[c]) for c in name_codes),
        lanes=tuple(lanes),
        lane=_ints(shown.lane),
        row=_ints(shown.row),
        start=_to_ns(shown.start),
        dur=_to_ns(shown.dur),
        name=_ints(name),
        module=_ints(module),
        phase=_ints(shown.phase),
        count=_ints(shown.counts),
        events_in_step=len(idx),
        merged_below_us=float(tiny_us),
        dropped=dropped,
        memory=mem,
    )


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    """The arrays one after the other, as integers."""
    return np.concatenate(arrays).astype(np.int64) if arrays else np.zeros(0, np.int64)


def _lanes(
    trace: Trace,
    links: Links,
    window: tuple[float, float],
    tree: TimelineTree,
    cpu: StepEvents,
    gpu: StepEvents,
    compiled: StepEvents | None,
) -> tuple[list[Lane], list[_Part]]:
    """The lanes of the step and the events on each: the module lanes (forward, backward), the
    CPU threads, the GPU streams."""
    ev = trace.events
    t0, t1 = window
    lanes: list[Lane] = []
    parts: list[_Part] = []

    def in_window(idx: np.ndarray) -> np.ndarray:
        t = ev.ts[idx]
        inside: np.ndarray = (t >= t0) & (t < t1)
        return inside

    # compiled kernels in their modules (the table's), on the lane of their graph's pass
    kernels = [np.zeros(0, np.int64)] * 2
    kernel_nodes = [np.zeros(0, np.int64)] * 2
    if compiled is not None and len(compiled.events):
        shown = in_window(compiled.events) & (compiled.node >= 0) & (compiled.node < tree.n_modules)
        for p in (0, 1):
            m = shown & (compiled.phase == p)
            kernels[p], kernel_nodes[p] = compiled.events[m], compiled.node[m]
    # module scopes of the forward: one row per scope nesting level
    scopes = np.flatnonzero(tree.scope_mask & ~tree.recompute_mask)
    scopes = scopes[in_window(scopes)]
    if len(scopes) or len(kernels[0]):
        idx = np.concatenate([scopes, kernels[0]])
        node = np.concatenate([tree.node_of_scope[scopes], kernel_nodes[0]])
        row = tree.depth_of[node]
        lanes.append(Lane(LaneKind.MODULES_FORWARD, "Modules · forward", int(row.max()) + 1))
        parts.append(_Part(len(lanes) - 1, row, idx, node, np.zeros(len(idx), np.int64)))
    # the selection's CPU events in the window, found once: the lanes below look at those only
    in_step = np.flatnonzero(in_window(cpu.events))
    cpu = StepEvents(cpu.events[in_step], cpu.node[in_step], cpu.phase[in_step])
    del in_step
    # backward: the backward node ops, at the depth of their module, and compiled kernels
    m = links.backward_node[cpu.events] == cpu.events
    m &= (cpu.node >= 0) & (cpu.node < tree.n_modules)
    if m.any() or len(kernels[1]):
        idx = np.concatenate([cpu.events[m], kernels[1]])
        node = np.concatenate([cpu.node[m], kernel_nodes[1]])
        phase = np.concatenate([cpu.phase[m], np.ones(len(kernels[1]), np.int64)])
        row = tree.depth_of[node]
        lanes.append(Lane(LaneKind.MODULES_BACKWARD, "Modules · backward", int(row.max()) + 1))
        parts.append(_Part(len(lanes) - 1, row, idx, node, phase))
    # CPU threads
    m = links.depth[cpu.events] < CPU_DEPTH
    sel = cpu.events[m]
    for t in unique(ev.thread[sel]).tolist():
        on = ev.thread[sel] == t
        lanes.append(
            Lane(LaneKind.CPU, _thread_label(ev.threads[t], "thread"), int(links.depth[sel[on]].max()) + 1)
        )
        parts.append(_Part(len(lanes) - 1, links.depth[sel[on]], sel[on], cpu.node[m][on], cpu.phase[m][on]))
    # GPU streams: the work launched in the step, however long after the step's end the device
    # runs it (a device that lags the CPU runs a step's kernels during the next steps)
    launched = ev.ts[gpu.events] if gpu.at is None else gpu.at
    m = (launched >= t0) & (launched < max(t1, t0))
    sel = gpu.events[m]
    for t in unique(ev.thread[sel]).tolist():
        on = ev.thread[sel] == t
        lanes.append(Lane(LaneKind.GPU, _thread_label(ev.threads[t], "stream"), 1))
        rows = np.zeros(int(on.sum()), np.int64)
        parts.append(_Part(len(lanes) - 1, rows, sel[on], gpu.node[m][on], gpu.phase[m][on]))
    return lanes, parts


def _thread_label(info: ThreadInfo, what: str) -> str:
    """``thread 13868 (python)``, ``GPU 0 · stream 7``: the trace's name for the thread, or
    its id."""
    name = " ".join((info.name or f"{what} {info.tid}").split())
    return f"GPU {info.pid} · {name}" if what == "stream" else name


def _codes(values: np.ndarray) -> tuple[list[int], np.ndarray]:
    """Distinct non-negative values (first-seen order) and each value's index among them."""
    out = np.full(len(values), -1, np.int64)
    ok = values >= 0
    if not ok.any():
        return [], out
    uniq, first, inverse = np.unique(values[ok], return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(uniq), np.int64)
    rank[order] = np.arange(len(uniq))
    out[ok] = rank[inverse.ravel()]
    return uniq[order].tolist(), out


def _merge_tiny(events: _Events, tiny_us: float) -> _Events:
    """Runs of consecutive events shorter than ``tiny_us`` on one lane row, of one module and
    pass, with gaps below ``tiny_us``, merged into one event each (the name of its longest)."""
    if len(events.lane) < 2:
        return events
    e = events.taken(np.lexsort((events.start, events.row, events.lane)))
    tiny = e.dur < tiny_us
    end = e.start + e.dur
    same = np.zeros(len(e.lane), bool)
    same[1:] = (
        tiny[1:]
        & tiny[:-1]
        & (e.lane[1:] == e.lane[:-1])
        & (e.row[1:] == e.row[:-1])
        & (e.node[1:] == e.node[:-1])
        & (e.phase[1:] == e.phase[:-1])
        & (e.start[1:] - end[:-1] < tiny_us)
    )
    if not same.any():
        return e
    group_start = np.flatnonzero(~same)
    g_end = np.maximum.reduceat(end, group_start)
    g_count = np.diff(np.append(group_start, len(e.lane)))
    # the name of the longest event of each group
    group = np.cumsum(~same) - 1
    longest = np.lexsort((-e.dur, group))
    first_of_group = longest[np.searchsorted(group[longest], np.arange(len(group_start)))]
    s = e.start[group_start]
    return _Events(
        lane=e.lane[group_start],
        row=e.row[group_start],
        start=s,
        dur=g_end - s,
        name=e.name[first_of_group],
        node=e.node[group_start],
        phase=e.phase[group_start],
        counts=g_count.astype(np.int64),
    )


def _memory_curve(
    trace: Trace,
    memory: StepEvents | None,
    device: str | None,
    t0: float,
    path_of: list[tuple[str, ...]],
    mod_codes: list[int],
) -> tuple[MemoryCurve, int] | None:
    """(MemoryCurve without its peak module, the peak's node) or None."""
    mem = trace.memory
    if memory is None or mem is None or not len(memory.events) or device is None:
        return None
    rows = memory.events
    if device not in mem.devices:
        return None
    on = mem.device[rows] == mem.devices.index(device)
    if not on.any():
        return None
    rows, node, phase = rows[on], memory.node[on], memory.phase[on]
    ev = trace.events
    t = ev.ts[mem.event[rows]] - t0
    order = np.argsort(t, kind="stable")
    rows, node, phase, t = rows[order], node[order], phase[order], t[order]
    total = mem.total_allocated[rows].astype(np.float64)
    exact = bool((total >= 0).all())
    if not exact:
        total = np.cumsum(mem.bytes[rows].astype(np.float64))
    peak = int(np.argmax(total))
    keep = np.arange(len(t))
    if len(t) > MAX_MEMORY_POINTS:
        buckets = MAX_MEMORY_POINTS // 2
        b = np.minimum((t - t[0]) / max(t[-1] - t[0], 1e-9) * buckets, buckets - 1).astype(int)
        lo = np.lexsort((total, b))
        hi = np.lexsort((-total, b))
        firsts = np.searchsorted(b[lo], np.arange(buckets))
        valid = firsts < len(b)
        valid[valid] &= b[lo][firsts[valid]] == np.arange(buckets)[valid]
        keep = unique(np.concatenate([lo[firsts[valid]], hi[firsts[valid]], [peak]]))
    peak_node = int(node[peak]) if 0 <= node[peak] < len(path_of) else -1
    curve = MemoryCurve(
        device=device,
        time_us=tuple(np.round(t[keep], 3).tolist()),
        allocated_bytes=tuple(total[keep].tolist()),
        peak_time_us=round(float(t[peak]), 3),
        peak_bytes=float(total[peak]),
        peak_module=-1,
        peak_phase=("forward", "backward", "other")[int(phase[peak])],
        exact_total=exact,
    )
    return curve, peak_node


def _blocks(blocks: StepBlocks, t0: float, span: float, n_paths: int, mod_codes: list[int]) -> MemoryBlocks:
    """The step's blocks on the timeline's axis (clipped to the step), the largest (bytes x
    time) past MAX_MEMORY_BLOCKS; their nodes added to ``mod_codes`` (the timeline's modules)."""
    start = np.clip(blocks.start - t0, 0.0, span)
    end = np.clip(blocks.end - t0, 0.0, span)
    nbytes, category, node = blocks.nbytes, blocks.category, blocks.node
    dropped = 0
    if len(start) > MAX_MEMORY_BLOCKS:
        keep = np.sort(np.argsort(-(nbytes * (end - start)), kind="stable")[:MAX_MEMORY_BLOCKS])
        dropped = len(start) - MAX_MEMORY_BLOCKS
        start, end, nbytes, category, node = (a[keep] for a in (start, end, nbytes, category, node))
    index = {c: i for i, c in enumerate(mod_codes)}
    named = (node >= 0) & (node < n_paths)
    for c in unique(node[named]).tolist():
        if c not in index:
            index[c] = len(mod_codes)
            mod_codes.append(c)
    module = np.full(len(node), -1, np.int64)
    if named.any():
        codes = np.array(list(index), np.int64)
        order = np.argsort(codes)
        module[named] = np.array(list(index.values()), np.int64)[order][
            np.searchsorted(codes[order], node[named])
        ]
    return MemoryBlocks(
        start=_to_ns(start),
        end=_to_ns(end),
        nbytes=tuple(nbytes.astype(np.float64).tolist()),
        category=_ints(category),
        module=_ints(module),
        dropped=dropped,
    )


def _ints(values: np.ndarray) -> tuple[int, ...]:
    """A column of the timeline: Python ints."""
    return tuple(values.astype(np.int64, copy=False).tolist())


def _to_ns(values: np.ndarray) -> tuple[float, ...]:
    """A column of times of the timeline (µs), to the ns."""
    return tuple(np.round(values.astype(np.float64, copy=False), 3).tolist())


def _with_peak_module(curve: MemoryCurve, module: int) -> MemoryCurve:

    return replace(curve, peak_module=module)

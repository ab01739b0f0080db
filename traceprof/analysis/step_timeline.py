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
from traceprof.trace.model import ThreadInfo, Trace, unique

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


def build_timeline(
    trace: Trace,
    links: Links,
    *,
    window: tuple[float, float],
    step: int | None,
    scope_mask: np.ndarray,
    node_of_scope: np.ndarray,
    recompute_mask: np.ndarray,
    n_modules: int,
    depth_of: np.ndarray,
    path_of: list[tuple[str, ...]],
    cpu: StepEvents,
    gpu: StepEvents,
    memory: StepEvents | None,
    memory_device: str | None,
    scope_labels: dict[int, str] | None = None,
    compiled: StepEvents | None = None,
    memory_blocks: StepBlocks | None = None,
) -> Timeline:
    """The timeline of the step in ``window`` (trace times). ``path_of[node]`` and
    ``depth_of[node]`` for attribution's node ids; ``cpu`` and ``gpu`` the selection's events
    (they are cut to the window here); ``memory``: its ``[memory]`` events (rows of
    ``trace.memory``), with their node and pass; ``scope_labels``: name code -> the label of
    module scope events (hierarchy.scope_labels), in place of their raw names; ``compiled``:
    kernel events of compiled graphs with the module node the compiled-kernel table gives them
    (and its ancestors made from the table), pass 0 forward or 1 backward: drawn on the module
    lanes as their scopes would be."""
    ev = trace.events
    t0, t1 = window
    lanes: list[Lane] = []
    # (lane, row, event index, node, pass)
    parts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def in_window(idx: np.ndarray) -> np.ndarray:
        t = ev.ts[idx]
        inside: np.ndarray = (t >= t0) & (t < t1)
        return inside

    # compiled kernels in their modules (the table's), on the lane of their graph's pass
    kernels = [np.zeros(0, np.int64)] * 2
    kernel_nodes = [np.zeros(0, np.int64)] * 2
    if compiled is not None and len(compiled.events):
        shown = in_window(compiled.events) & (compiled.node >= 0) & (compiled.node < n_modules)
        for p in (0, 1):
            m = shown & (compiled.phase == p)
            kernels[p], kernel_nodes[p] = compiled.events[m], compiled.node[m]
    # module scopes of the forward: one row per scope nesting level
    scopes = np.flatnonzero(scope_mask & ~recompute_mask)
    scopes = scopes[in_window(scopes)]
    if len(scopes) or len(kernels[0]):
        idx = np.concatenate([scopes, kernels[0]])
        node = np.concatenate([node_of_scope[scopes], kernel_nodes[0]])
        row = depth_of[node]
        lanes.append(Lane(LaneKind.MODULES_FORWARD, "Modules · forward", int(row.max()) + 1))
        parts.append((len(lanes) - 1, row, idx, node, np.zeros(len(idx), np.int64)))
    # the selection's CPU events in the window, found once: the lanes below look at those only
    in_step = np.flatnonzero(in_window(cpu.events))
    cpu = StepEvents(cpu.events[in_step], cpu.node[in_step], cpu.phase[in_step])
    del in_step
    # backward: the backward node ops, at the depth of their module, and compiled kernels
    m = links.backward_node[cpu.events] == cpu.events
    m &= (cpu.node >= 0) & (cpu.node < n_modules)
    if m.any() or len(kernels[1]):
        idx = np.concatenate([cpu.events[m], kernels[1]])
        node = np.concatenate([cpu.node[m], kernel_nodes[1]])
        phase = np.concatenate([cpu.phase[m], np.ones(len(kernels[1]), np.int64)])
        row = depth_of[node]
        lanes.append(Lane(LaneKind.MODULES_BACKWARD, "Modules · backward", int(row.max()) + 1))
        parts.append((len(lanes) - 1, row, idx, node, phase))
    # CPU threads
    m = links.depth[cpu.events] < CPU_DEPTH
    sel = cpu.events[m]
    for t in unique(ev.thread[sel]).tolist():
        on = ev.thread[sel] == t
        info = ev.threads[t]
        row = links.depth[sel[on]]
        lanes.append(Lane(LaneKind.CPU, _thread_label(info, "thread"), int(row.max()) + 1))
        parts.append((len(lanes) - 1, row, sel[on], cpu.node[m][on], cpu.phase[m][on]))
    # GPU streams: the work launched in the step, however long after the step's end the device
    # runs it (a device that lags the CPU runs a step's kernels during the next steps)
    launched = ev.ts[gpu.events] if gpu.at is None else gpu.at
    m = (launched >= t0) & (launched < max(t1, t0))
    sel = gpu.events[m]
    for t in unique(ev.thread[sel]).tolist():
        on = ev.thread[sel] == t
        info = ev.threads[t]
        lanes.append(Lane(LaneKind.GPU, _thread_label(info, "stream"), 1))
        parts.append(
            (len(lanes) - 1, np.zeros(int(on.sum()), np.int64), sel[on], gpu.node[m][on], gpu.phase[m][on])
        )
    if parts:
        lane = np.concatenate([np.full(len(p[2]), p[0], np.int64) for p in parts])
        row = np.concatenate([np.asarray(p[1], np.int64) for p in parts])
        idx = np.concatenate([p[2] for p in parts]).astype(np.int64)
        node = np.concatenate([p[3] for p in parts]).astype(np.int64)
        phase = np.concatenate([np.asarray(p[4], np.int64) for p in parts])
    else:
        lane = row = idx = node = phase = np.zeros(0, np.int64)
    end = max(t1, float((ev.ts[idx] + ev.dur[idx]).max()) if len(idx) else t1)
    span = max(end - t0, 1e-3)
    start: np.ndarray = ev.ts[idx] - t0
    dur = ev.dur[idx]
    name: np.ndarray = ev.name[idx].astype(np.int64)
    n_in_step = len(idx)

    # merge runs of tiny events, then leave out the shortest past MAX_EVENTS
    tiny_us = span / MERGE_FRACTION
    lane, row, start, dur, name, node, phase, count = _merge_tiny(
        lane, row, start, dur, name, node, phase, tiny_us
    )
    dropped = 0
    if len(lane) > MAX_EVENTS:
        keep = np.sort(np.argsort(-dur, kind="stable")[:MAX_EVENTS])
        dropped = len(lane) - MAX_EVENTS
        lane, row, start, dur, name, node, phase, count = (
            a[keep] for a in (lane, row, start, dur, name, node, phase, count)
        )

    # modules and names actually used, renumbered
    mod_codes, module = _codes(np.where((node >= 0) & (node < len(path_of)), node, -1))
    name_codes, name = _codes(name)
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
        names=tuple((scope_labels or {}).get(c, ev.names[c]) for c in name_codes),
        lanes=tuple(lanes),
        lane=lane,
        row=row,
        start=start,
        dur=dur,
        name=name,
        module=module,
        phase=phase,
        count=count,
        events_in_step=n_in_step,
        merged_below_us=float(tiny_us),
        dropped=dropped,
        memory=mem,
    )


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


def _merge_tiny(
    lane: np.ndarray,
    row: np.ndarray,
    start: np.ndarray,
    dur: np.ndarray,
    name: np.ndarray,
    node: np.ndarray,
    phase: np.ndarray,
    tiny_us: float,
) -> tuple[np.ndarray, ...]:
    """Runs of consecutive events shorter than ``tiny_us`` on one lane row, of one module and
    pass, with gaps below ``tiny_us``, merged into one event each (the name of its longest)."""
    count = np.ones(len(lane), np.int64)
    if len(lane) < 2:
        return lane, row, start, dur, name, node, phase, count
    order = np.lexsort((start, row, lane))
    lane, row, start, dur, name, node, phase = (a[order] for a in (lane, row, start, dur, name, node, phase))
    tiny = dur < tiny_us
    end = start + dur
    same = np.zeros(len(lane), bool)
    same[1:] = (
        tiny[1:]
        & tiny[:-1]
        & (lane[1:] == lane[:-1])
        & (row[1:] == row[:-1])
        & (node[1:] == node[:-1])
        & (phase[1:] == phase[:-1])
        & (start[1:] - end[:-1] < tiny_us)
    )
    if not same.any():
        return lane, row, start, dur, name, node, phase, count
    group_start = np.flatnonzero(~same)
    g_end = np.maximum.reduceat(end, group_start)
    g_count = np.diff(np.append(group_start, len(lane)))
    # the name of the longest event of each group
    group = np.cumsum(~same) - 1
    longest = np.lexsort((-dur, group))
    first_of_group = longest[np.searchsorted(group[longest], np.arange(len(group_start)))]
    s = start[group_start]
    return (
        lane[group_start],
        row[group_start],
        s,
        g_end - s,
        name[first_of_group],
        node[group_start],
        phase[group_start],
        g_count.astype(np.int64),
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
        start=start.astype(np.float64),
        end=end.astype(np.float64),
        nbytes=nbytes.astype(np.float64),
        category=category.astype(np.int8),
        module=module,
        dropped=dropped,
    )


def _with_peak_module(curve: MemoryCurve, module: int) -> MemoryCurve:

    return replace(curve, peak_module=module)

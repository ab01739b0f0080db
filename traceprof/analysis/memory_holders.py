"""Who holds the memory: activations per node, and the allocations alive at the step's peak and
at the end of the forward pass, by category.

From the lifetimes of the blocks (:mod:`traceprof.analysis.lifetimes`) and the node and pass of
each ``[memory]`` event (:mod:`traceprof.analysis.memory_events`):

- **activations** of a node: the bytes its forward allocated (its own scope's events; the
  subtree's for ``activation_bytes``) that are still allocated when the backward pass begins,
  the start of the first backward node op after the allocation in its step (a step of several
  forward and backward passes, gradient accumulation, has one beginning per backward). Per step,
  the mean over the selection. A module checkpointed by activation checkpointing keeps nothing
  of its own forward (its input is its caller's); its forward re-run in the backward allocates
  there, in the backward pass (``recomputed_bytes``).
- **categories** of the allocations alive at a moment on the memory device: a block allocated
  in a backward pass and alive at that pass's end is a **gradient**; one allocated under the
  optimizer's step (``Optimizer.step#...``, ``aten::_foreach_*``, fused optimizers) and alive at
  its step's end is **optimizer state**; one allocated in a forward pass (in a module, or
  outside the modules by an op autograd recorded: the loss) and still allocated when the
  backward begins is an **activation** of the node that allocated it (in a step without a
  backward, an inference, every forward block alive is: the outputs in flight); the rest made
  in the trace are **temporaries** (a forward's blocks freed before its backward begins). Blocks allocated before
  the trace are the allocator's total less those: the **parameters** (the module table's
  bytes, when the total counts them) and the rest **before the trace**.

Vectorised over lifetimes: sorts, searches and bincounts, no Python work per event.
"""

from __future__ import annotations

import msgspec
import numpy as np

from traceprof import units
from traceprof.analysis.classify import BACKWARD, FORWARD, Context
from traceprof.analysis.hierarchy import Hierarchy
from traceprof.analysis.lifetimes import Lifetimes
from traceprof.analysis.link import Links
from traceprof.analysis.memory_events import SelectedMemory
from traceprof.analysis.steps import Steps
from traceprof.result.memory import (
    ACTIVATION,
    GRADIENT,
    MAX_HOLDERS,
    OPTIMIZER_STATE,
    TEMPORARY,
    MemoryHolder,
    MemoryMoment,
    MemorySummary,
)
from traceprof.trace.columns import Trace

PHASES = ("forward", "backward", "other")


class StepBlocks(msgspec.Struct, frozen=True):
    """Blocks alive during a step: trace times of their allocation and free (+inf: alive at the
    trace's end), bytes, category code, the node that allocated them (-1: none known)."""

    start: np.ndarray
    end: np.ndarray
    nbytes: np.ndarray
    category: np.ndarray
    node: np.ndarray


class BackwardSpans(msgspec.Struct, frozen=True):
    """The backward passes: the start of each (sorted), and per step (positions of
    ``ctx.steps``, one more for the times outside every step) the end of its last one."""

    start: np.ndarray
    step_end_of_backward: np.ndarray  # -inf: the step has no backward work


def backward_spans(trace: Trace, links: Links, tree: Hierarchy, steps: Steps) -> BackwardSpans:
    """Backward node ops (outermost) in runs: a run is one backward pass, and a new one begins
    after a module's forward or in another step (gradient accumulation runs several a step)."""
    ev = trace.events
    region = links.backward_region
    n = len(region)
    own = np.flatnonzero(region == np.arange(n, dtype=region.dtype))
    if len(own):  # outermost: no region around the region's parent
        p = links.parent[own]
        own = own[(p < 0) | (region[np.maximum(p, 0)] < 0)]
    start = ev.ts[own].astype(np.float64)
    end = start + ev.dur[own]
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    per_step = np.full(len(steps.numbers) + 1, -np.inf)
    if not len(start):
        return BackwardSpans(start, per_step)
    step = _steps_of(steps, start)
    np.maximum.at(per_step, step, end)
    # a module's forward between two backward node ops: a new pass
    scopes = tree.scope_mask & ~tree.recompute_mask & (region < 0)
    forward_starts = np.sort(ev.ts[scopes].astype(np.float64))
    prev_end = np.maximum.accumulate(end)
    between = np.ones(len(start), bool)
    between[1:] = np.searchsorted(forward_starts, start[1:], side="left") > np.searchsorted(
        forward_starts, prev_end[:-1], side="right"
    )
    between[1:] |= step[1:] != step[:-1]
    return BackwardSpans(start[between], per_step)


def _step_of(ctx: Context, t: np.ndarray) -> np.ndarray:
    """Position of the step holding each time (the last entry, one past the steps, for a trace
    without steps or a time outside them)."""
    return _steps_of(ctx.steps, t)


def _steps_of(steps: Steps, t: np.ndarray) -> np.ndarray:
    if not len(steps.numbers):
        return np.zeros(len(t), np.int64)
    pos = steps.of_time(t)
    return np.where(pos >= 0, pos, len(steps.numbers))


def _step_ends(ctx: Context) -> np.ndarray:
    """The end of every step, and +inf for the times outside them (the last entry)."""
    return np.append(ctx.steps.end.astype(np.float64), np.inf)


def _row_array(n_rows: int, keep: np.ndarray, values: np.ndarray, fill: int) -> np.ndarray:
    out = np.full(n_rows, fill, np.int64)
    out[keep] = values
    return out


def _held_for_backward(ctx: Context, spans: BackwardSpans, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Whether each block allocated at ``start`` is still allocated (freed at ``end`` or later)
    when the first backward pass after it begins in its step."""
    begins_at = np.append(spans.start, np.inf)  # past the last: none
    begins = begins_at[np.searchsorted(spans.start, start, side="right")]
    has = begins < _step_ends(ctx)[_step_of(ctx, start)]  # it begins in the allocation's step
    held: np.ndarray = has & (end >= begins)
    return held


def activations_by_node(
    ctx: Context, memory: SelectedMemory, life: Lifetimes, spans: BackwardSpans, n_nodes: int
) -> np.ndarray | None:
    """Per device and node (``[device, node]``), the bytes per step the node's own forward
    allocated in the selection and that are still allocated when the backward pass begins;
    None when the trace has no lifetimes or the selection no backward pass."""
    mem = ctx.trace.memory
    if mem is None or not life.has_addresses or not len(life) or not len(spans.start):
        return None
    n_rows = len(mem)
    node_of = _row_array(n_rows, memory.keep, memory.node, -1)
    a = life.alloc
    made = a >= 0
    am = np.maximum(a, 0)
    forward = made & memory.keep[am] & (memory.row_pass[am] == FORWARD) & (node_of[am] >= 0)
    if not ctx.in_selection(spans.start).any():
        return None  # an inference: no backward pass in the selection
    idx = np.flatnonzero(forward)
    idx = idx[_held_for_backward(ctx, spans, life.start[idx], life.end[idx])]
    nodes = node_of[a[idx]]
    out = np.zeros((len(mem.devices), n_nodes))
    for d in range(len(mem.devices)):
        on = life.device[idx] == d
        if on.any():
            out[d] = np.bincount(
                nodes[on], weights=life.nbytes[idx][on].astype(np.float64), minlength=n_nodes
            )[:n_nodes]
    result: np.ndarray = out / ctx.n_steps
    return result


def memory_summary(
    ctx: Context,
    memory: SelectedMemory,
    life: Lifetimes,
    spans: BackwardSpans | None,
    device: str | None,
    *,
    activation: np.ndarray | None,
    parent: np.ndarray,
    qualified_names: list[str],
    paths: list[tuple[str, ...]],
    parameter_bytes: float | None,
) -> MemorySummary | None:
    """The holders of the memory device's memory (None when the selection has no memory events
    on a device). ``activation``: activations_by_node's table."""
    trace = ctx.trace
    mem = trace.memory
    if mem is None or device is None or device not in mem.devices:
        return None
    d = mem.devices.index(device)
    activation_total = None if activation is None else float(activation[d].sum())
    recomputed, recomputed_modules = _recomputed(ctx, memory, parent, qualified_names)
    base = MemorySummary(
        device=device,
        lifetimes=len(life) if life.has_addresses else None,
        allocated_before_trace=life.allocated_before,
        alive_at_trace_end=life.alive_at_end,
        activation_bytes=activation_total,
        recomputed_bytes=recomputed,
        recomputed_modules=recomputed_modules,
    )
    if not life.has_addresses or spans is None:
        note = "the trace's [memory] events have no addresses (traces before 2022): what holds memory is not known"
        return msgspec.structs.replace(base, note=note)
    rows = np.flatnonzero(memory.keep)
    on = mem.device[rows] == d
    rows = rows[on]
    if not len(rows):
        return base
    node_of = _row_array(len(mem), memory.keep, memory.node, -1)
    totals = mem.total_allocated[rows].astype(np.float64)
    if not (totals >= 0).all():
        note = "the trace's [memory] events have no allocator totals: the peak's categories are not known"
        return msgspec.structs.replace(base, note=note)
    by_time = np.argsort(life.order[rows], kind="stable")
    rows, totals = rows[by_time], totals[by_time]
    peak_row = int(rows[int(np.argmax(totals))])  # the first event reaching the highest total
    ctx_moment = _MomentContext(ctx, memory, life, spans, d, node_of, qualified_names, paths, parameter_bytes)
    peak = ctx_moment.at(peak_row)
    forward_end = None
    t_peak = float(trace.events.ts[mem.event[peak_row]])
    step = _step_of(ctx, np.array([t_peak]))[0]
    begins = spans.start[_step_of(ctx, spans.start) == step]
    if len(begins):  # the backward that began last before the peak, else the first after it
        b = float(begins[begins <= t_peak][-1]) if (begins <= t_peak).any() else float(begins[0])
        t = trace.events.ts[mem.event[rows]]
        before = rows[(t < b) & (_step_of(ctx, t) == step)]
        if len(before):
            forward_end = ctx_moment.at(int(before[-1]))
    return msgspec.structs.replace(base, peak=peak, forward_end=forward_end)


class _MomentContext:
    """What :meth:`at` needs to sort the blocks alive at a moment into categories."""

    def __init__(
        self,
        ctx: Context,
        memory: SelectedMemory,
        life: Lifetimes,
        spans: BackwardSpans,
        device: int,
        node_of: np.ndarray,
        qualified_names: list[str],
        paths: list[tuple[str, ...]],
        parameter_bytes: float | None,
    ) -> None:
        self.ctx, self.memory, self.life, self.spans, self.device = ctx, memory, life, spans, device
        self.node_of, self.names, self.paths = node_of, qualified_names, paths
        self.parameter_bytes = parameter_bytes

    def at(self, row: int) -> MemoryMoment:
        """The allocations alive just after the memory event ``row``."""
        ctx, memory, life = self.ctx, self.memory, self.life
        trace = ctx.trace
        mem = trace.memory
        assert mem is not None
        alive = np.flatnonzero(life.alive_at(int(life.order[row]), self.device))
        a = life.alloc[alive]
        made = a >= 0
        alive, a = alive[made], a[made]
        nbytes = life.nbytes[alive].astype(np.float64)
        category = block_categories(ctx, memory, life, self.spans, alive)
        gradient, optimizer = category == GRADIENT, category == OPTIMIZER_STATE
        activation, temporary = category == ACTIVATION, category == TEMPORARY
        known = float(nbytes.sum())
        total = float(mem.total_allocated[row])
        before: float | None = total - known if total >= 0 else None
        params = self.parameter_bytes
        # the CPU allocator counts the blocks allocated while a profiler runs, never the
        # parameters made before it; an accelerator's counts every block
        on_cpu = mem.devices[self.device] == "cpu"
        in_total = params is not None and before is not None and not on_cpu and before >= params * 0.99
        if before is not None:
            before = max(before - (params or 0.0), 0.0) if in_total else max(before, 0.0)
        # activations by the node that allocated them
        nodes = self.node_of[a[activation]]
        weights = nbytes[activation]
        n = len(self.names)
        listed = nodes >= 0
        per_node = np.bincount(nodes[listed], weights=weights[listed], minlength=n)[:n]
        top = np.argsort(-per_node, kind="stable")
        top = top[per_node[top] > 0][:MAX_HOLDERS]
        holders = tuple(MemoryHolder(self.paths[i], self.names[i], float(per_node[i])) for i in top.tolist())
        other = float(weights.sum()) - sum(h.bytes for h in holders)
        t = float(trace.events.ts[mem.event[row]])
        pos = _step_of(ctx, np.array([t]))[0]
        has_steps = len(ctx.steps.numbers) and pos < len(ctx.steps.numbers)
        t0 = float(ctx.steps.start[pos]) if has_steps else _trace_start(trace)
        node = int(self.node_of[row])
        return MemoryMoment(
            step=int(ctx.steps.numbers[pos]) if has_steps else None,
            time_us=round(t - t0, 3),
            phase=PHASES[int(memory.row_pass[row])],
            module=self.names[node] if 0 <= node < n else None,
            module_path=tuple(self.paths[node]) if 0 <= node < n else (),
            total_bytes=total if total >= 0 else None,
            parameters_bytes=params,
            parameters_in_total=bool(in_total),
            gradients_bytes=float(nbytes[gradient].sum()),
            optimizer_state_bytes=float(nbytes[optimizer].sum()),
            activations_bytes=float(weights.sum()),
            temporaries_bytes=float(nbytes[temporary].sum()),
            before_trace_bytes=before,
            activations_by_module=holders,
            other_modules_bytes=max(other, 0.0),
        )


def block_categories(
    ctx: Context, memory: SelectedMemory, life: Lifetimes, spans: BackwardSpans, idx: np.ndarray
) -> np.ndarray:
    """The category code (result.memory.CATEGORIES) of the lifetimes ``idx``, allocated in the
    trace (``life.alloc`` >= 0): a property of the block, whatever the moment."""
    a = life.alloc[idx]
    start, end = life.start[idx], life.end[idx]
    pass_ = memory.row_pass[a]
    step = _step_of(ctx, start)
    gradient = (pass_ == BACKWARD) & (end > spans.step_end_of_backward[step])
    optimizer = ~gradient & memory.row_optimizer[a] & (end > _step_ends(ctx)[step])
    activation = ~gradient & ~optimizer & (pass_ == FORWARD)
    # kept for the backward; in a step without one (an inference), the outputs in flight
    held = _held_for_backward(ctx, spans, start[activation], end[activation])
    activation[activation] = held | ~np.isfinite(spans.step_end_of_backward[step[activation]])
    code = np.full(len(idx), TEMPORARY, np.int8)
    code[activation] = ACTIVATION
    code[gradient] = GRADIENT
    code[optimizer] = OPTIMIZER_STATE
    return code


def step_blocks(
    ctx: Context,
    memory: SelectedMemory,
    life: Lifetimes,
    spans: BackwardSpans,
    device: str | None,
    window: tuple[float, float],
) -> StepBlocks | None:
    """The blocks allocated in the trace and alive during ``window`` on ``device`` (the
    timeline's step), with their category and node: the memory curve stacked by category or by
    module. None without lifetimes."""
    mem = ctx.trace.memory
    if mem is None or device is None or device not in mem.devices or not life.has_addresses:
        return None
    d = mem.devices.index(device)
    t0, t1 = window
    idx = np.flatnonzero((life.device == d) & (life.alloc >= 0) & (life.start < t1) & (life.end > t0))
    node_of = _row_array(len(mem), memory.keep, memory.node, -1)
    return StepBlocks(
        start=life.start[idx],
        end=life.end[idx],
        nbytes=life.nbytes[idx].astype(np.float64),
        category=block_categories(ctx, memory, life, spans, idx),
        node=node_of[life.alloc[idx]],
    )


def _trace_start(trace: Trace) -> float:
    ts = trace.events.ts
    finite = np.isfinite(ts)
    return float(ts[finite].min()) if finite.any() else 0.0


def _recomputed(
    ctx: Context, memory: SelectedMemory, parent: np.ndarray, names: list[str]
) -> tuple[float, tuple[str, ...]]:
    """Bytes per step allocated by modules re-run in the backward (activation checkpointing),
    and the outermost of those modules."""
    mem = ctx.trace.memory
    if mem is None or not len(memory.row_recomputed):
        return 0.0, ()
    kept = memory.row_recomputed[memory.keep]
    if not kept.any():
        return 0.0, ()
    nbytes = mem.bytes[memory.keep][kept].astype(np.float64)
    nodes = np.unique(memory.node[kept])
    nodes = nodes[(nodes >= 0) & (nodes < len(names))]
    inside = set(nodes.tolist())
    outermost = []
    for i in nodes.tolist():
        p = int(parent[i])
        while p >= 0 and p not in inside:
            p = int(parent[p])
        if p < 0:
            outermost.append(names[i])
    return float(np.maximum(nbytes, 0).sum()) / ctx.n_steps, tuple(outermost)


def parameter_bytes(trace: Trace) -> float | None:
    """The parameters' bytes of the module table (its root modules', shared tensors once);
    None without a table or without the sizes (traces captured before they were recorded)."""
    table = trace.metadata.module_table
    if table is None:
        return None
    mods = table.modules
    roots = [info for name, info in mods.items() if name == ""] or [
        info for name, info in mods.items() if name and "." not in name
    ]
    sizes = [info.param_bytes_total for info in roots]
    if not roots or any(s is None for s in sizes):
        return None
    return float(sum(s for s in sizes if s is not None))


def lifetime_warnings(life: Lifetimes) -> list[str]:
    """The repairs made while pairing allocations with frees, counted."""
    out = []
    if life.free_missing:
        out.append(
            f"{units.counted(life.free_missing, 'allocation')} of a block allocated again without a free "
            "between them (a [memory] event lost): each taken as freed when its block was allocated again"
        )
    if life.size_mismatch:
        n = life.size_mismatch
        out.append(
            f"{units.counted(n, 'free')} of another size than {'their' if n != 1 else 'its'} "
            "block's allocation: the allocation's size kept"
        )
    if life.without_address:
        out.append(
            f"{units.counted(life.without_address, '[memory] event')} without an address left out of the lifetimes"
        )
    return out

"""Inside a module: its ops and kernels, per pass (the "why" behind each module's numbers).

A stage of attribution: it receives the work items of the selected steps already attributed to
nodes and passes (GPU work through its launch, CPU time through the slice it was spent in,
FLOPs through the counted op) and groups each node's **own** work by

- **op**: the outermost CPU op around the work inside the node's innermost module scope (what
  the module's code called: ``aten::linear``, ``aten::conv2d``; in the backward, the autograd
  engine's backward node op), with that op's input shapes. Work in no op is labelled by the
  slice it was spent in (a runtime call, an annotation), or by :data:`~traceprof.analysis.labels.OUTSIDE_OPS` (the
  module's own time outside every op) and :data:`~traceprof.analysis.labels.BETWEEN_OPS_LABEL` (a step's time between
  its top-level slices);
- **kernel**: the name of each kernel, memcpy or memset.

So, per node and pass, the op rows add up to the node's own GPU busy time, GPU work time,
kernels, CPU time and FLOPs, and the kernel rows to its own GPU busy and work time and kernels
(``ModuleProfile.self_check``). A node keeps its :data:`MAX_ROWS` largest rows of each kind and
pass; the rest are folded into one ``(N more)`` row that keeps their sums.
"""

from __future__ import annotations

import json
from typing import NamedTuple

import msgspec
import numpy as np
from msgspec.structs import replace

from traceprof.analysis.labels import BETWEEN_OPS_LABEL, OUTSIDE_OPS
from traceprof.analysis.link import Links
from traceprof.analysis.unattributed import LAUNCH_NOT_IN_TRACE, LAUNCHED_BEFORE_TRACE
from traceprof.result.model import OpKind, OpStat, bounded
from traceprof.result.times import OP_SUMMED as _SUMMED
from traceprof.trace import schema
from traceprof.trace.columns import BLOCK_EVENTS, EventTable, Trace, unique
from traceprof.trace.schema import Kind

#: label of GPU work whose launch is not in the trace
_PASS_VALUES = ("forward", "backward", "other")  # profile.PASSES order (pass codes 0, 1, 2)
# the summed fields follow kind, name, pass and shapes in OpStat: rows are built positionally
assert OpStat.__struct_fields__[4 : 4 + len(_SUMMED)] == _SUMMED


class Attributed(msgspec.Struct, frozen=True):
    """Events of the selected steps with their node (attribution's ids) and pass code."""

    events: np.ndarray  # int64 event indices (GPU work: its anchor is in ``anchor``)
    node: np.ndarray
    phase: np.ndarray
    weight: np.ndarray  # µs of exclusive CPU time, FLOPs, or GPU busy time (shared)


def ops_by_node(
    trace: Trace,
    links: Links,
    scope_mask: np.ndarray,
    is_step: np.ndarray,
    n_nodes: int,
    n_steps: int,
    *,
    cpu: Attributed,
    counted: Attributed,
    gpu: Attributed,
    gpu_anchor: np.ndarray,
    gpu_before_trace: np.ndarray | None = None,
) -> list[tuple[OpStat, ...]]:
    """The ops and kernels rows of every node (attribution's node ids), largest first. GPU work
    without its launch in the trace is one row, named as the tree names it: launched before the
    trace (``gpu_before_trace``), or launch not in trace."""
    ev = trace.events
    labels = _op_labels(ev)
    radix = _Radix(
        max(n_nodes, _max_plus_one(cpu.node, counted.node, gpu.node)),
        len(_PASS_VALUES),
        len(labels.labels),
        len(ev.texts) + 1,
    )
    # op rows: calls (the op events themselves), CPU time, FLOPs, GPU work; each kind of work
    # has only its own metrics (the others are zero)
    parts = ((cpu, cpu.events, None), (counted, counted.events, None), (gpu, gpu_anchor, gpu_before_trace))
    events_of = _OpEvents(ev, _outermost_op(ev, links, scope_mask), scope_mask, is_step)
    op_keys, is_call = _op_keys(events_of, labels, radix, parts)
    del events_of  # the outermost ops
    op_rows = _grouped(
        op_keys,
        [
            {"calls": is_call, "cpu_us": cpu.weight},
            {"flops": counted.weight},
            {
                "kernels": ev.kind[gpu.events] == Kind.KERNEL,
                "gpu_busy_us": gpu.weight,
                "gpu_work_us": ev.dur[gpu.events],
            },
        ],
    )
    del op_keys, is_call
    kernel_rows = _kernel_rows(ev, radix, gpu)
    rows = ((OpKind.OP, op_rows), (OpKind.KERNEL, kernel_rows))
    return _op_stats(ev, labels.labels, rows, n_nodes, n_steps)


class _OpLabels(NamedTuple):
    """The labels of the op rows: each name's code (names that views spell alike,
    schema.op_label, share the first one's), the texts, then the codes of the rows of no op."""

    label_of: np.ndarray
    labels: list[str]
    outside: int
    between: int
    no_launch: int
    before_trace: int


def _op_labels(ev: EventTable) -> _OpLabels:
    """Rows by label: the trace's names as the op rows show them, and the rows of no op."""
    n_names = len(ev.names)
    shown = [schema.op_label(name) for name in ev.names]
    first: dict[str, int] = {}
    label_of = np.array([first.setdefault(text, code) for code, text in enumerate(shown)] or [0], np.int64)
    labels = shown + [OUTSIDE_OPS, BETWEEN_OPS_LABEL, LAUNCH_NOT_IN_TRACE, LAUNCHED_BEFORE_TRACE]
    return _OpLabels(label_of, labels, n_names, n_names + 1, n_names + 2, n_names + 3)


class _OpEvents(NamedTuple):
    """The events an op row's key is read from: each event's outermost op (``top``), the
    module scopes and the steps."""

    ev: EventTable
    top: np.ndarray
    scope_mask: np.ndarray
    is_step: np.ndarray


def _op_keys(
    events_of: _OpEvents,
    labels: _OpLabels,
    radix: _Radix,
    parts: tuple[tuple[Attributed, np.ndarray, np.ndarray | None], ...],
) -> tuple[_Keys, np.ndarray]:
    """The keys of the op rows of the CPU time, the counted ops and the GPU work (``parts``:
    each with the CPU events its rows are keyed by, and the work launched before the trace),
    and which CPU time rows are calls (the op events themselves)."""
    top = events_of.top
    cpu = parts[0][0]
    is_call = (cpu.events >= 0) & (top[np.maximum(cpu.events, 0)] == cpu.events)
    op_keys = _Keys(radix, [len(events) for _, events, _ in parts])
    for (of, events, before), at in zip(parts, op_keys.bounds):
        _write_op_keys(op_keys, at, of, events, before, events_of, labels)
    return op_keys, is_call


def _write_op_keys(
    keys: _Keys,
    at: int,
    of: Attributed,
    events: np.ndarray,
    before: np.ndarray | None,
    events_of: _OpEvents,
    labels: _OpLabels,
) -> None:
    """Keys of the rows of ``of``: the label and shapes of the op (``top``) each CPU event
    of ``events`` belongs to; in blocks, so that the temporaries stay small."""
    ev, top = events_of.ev, events_of.top
    for lo in range(0, len(events), BLOCK_EVENTS):
        block = slice(lo, lo + BLOCK_EVENTS)
        e = np.maximum(events[block], 0)
        op = np.where(events[block] >= 0, top[e], -1)
        has = op >= 0
        label = labels.label_of[np.where(has, ev.name[np.maximum(op, 0)], ev.name[e])]
        label[~has & events_of.scope_mask[e]] = labels.outside
        label[~has & events_of.is_step[e]] = labels.between
        label[events[block] < 0] = labels.no_launch
        if before is not None:
            label[before[block]] = labels.before_trace
        shapes = np.where(has, ev.input_dims[np.maximum(op, 0)], -1)
        keys.write(at + lo, of.node[block], of.phase[block], label, shapes)


def _kernel_rows(ev: EventTable, radix: _Radix, gpu: Attributed) -> tuple[np.ndarray, np.ndarray]:
    """The kernel rows: the GPU work by node, pass and kernel name, grouped."""
    work = gpu.events
    kernel_keys = _Keys(radix, [len(work)])
    kernel_keys.write(0, gpu.node, gpu.phase, ev.name[work], np.full(len(work), -1, np.int32))
    return _grouped(
        kernel_keys,
        [
            {
                "calls": np.ones(len(work), bool),
                "kernels": ev.kind[work] == Kind.KERNEL,
                "gpu_busy_us": gpu.weight,
                "gpu_work_us": ev.dur[work],
            }
        ],
    )


def _op_stats(
    ev: EventTable,
    labels: list[str],
    rows: tuple[tuple[OpKind, tuple[np.ndarray, np.ndarray]], ...],
    n_nodes: int,
    n_steps: int,
) -> list[tuple[OpStat, ...]]:
    """The OpStats of every node from the grouped rows (keys and sums), per step, largest first."""
    out: list[list[OpStat]] = [[] for _ in range(n_nodes)]
    texts: dict[int, str | None] = {-1: None}  # shapes code -> compact text, once per code
    for kind, (keys, sums) in rows:
        mine = (keys[:, 0] >= 0) & (keys[:, 0] < n_nodes)
        for (node, phase, label, shapes), values in zip(keys[mine].tolist(), (sums[mine] / n_steps).tolist()):
            if shapes not in texts:
                texts[shapes] = _compact(ev.texts[shapes])
            out[node].append(OpStat(kind, labels[label], _PASS_VALUES[phase], texts[shapes], *values))
    return [bounded(rows) for rows in out]


def with_modules(
    rows: list[tuple[OpStat, ...]], spans: dict[tuple[str, int, str, str], str]
) -> list[tuple[OpStat, ...]]:
    """The rows of each node, those of kernels fused across modules with the modules they
    span (``spans``: (kind, node, pass, name) -> "a, b")."""
    out = []
    for node, node_rows in enumerate(rows):
        out.append(
            tuple(
                replace(r, modules=spans[key])
                if (key := (r.kind.value, node, r.phase, r.name)) in spans
                else r
                for r in node_rows
            )
        )
    return out


def _compact(raw: bytes) -> str:
    """Recorded input dims (raw JSON) as one line: ``[[2, 3, 64, 64], [64, 3, 7, 7]]``."""
    try:
        return json.dumps(json.loads(raw))
    except (ValueError, RecursionError):
        return raw.decode("utf-8", "replace")


def _outermost_op(ev: EventTable, links: Links, scope_mask: np.ndarray) -> np.ndarray:
    """For every CPU slice, the outermost CPU op around it (or itself) inside its innermost
    scope, -1 when there is none."""
    n = len(ev)
    is_op = (ev.kind == Kind.CPU_OP) & ~scope_mask
    top = np.full(n, -1, links.parent.dtype)
    for level in links.levels:
        p = links.parent[level]
        pp = np.maximum(p, 0)
        inherited = np.where((p >= 0) & ~scope_mask[pp], top[pp], -1)
        top[level] = np.where(inherited >= 0, inherited, np.where(is_op[level], level, -1))
    return top


def _max_plus_one(*columns: np.ndarray) -> int:
    return max((int(c.max()) + 1 for c in columns if len(c)), default=0)


class _Radix(msgspec.Struct, frozen=True):
    """Sizes of the four key columns: node, pass code, label code, shapes code + 1."""

    node: int
    phase: int
    label: int
    shapes: int

    @property
    def fits_int64(self) -> bool:
        return float(self.node) * self.phase * self.label * self.shapes < 2.0**62


class _Keys:
    """The (node, pass, label, shapes) keys of rows written part by part: one int64 per row in
    mixed radix, written into one array (no stack of the four columns of every row, no
    concatenation), or, for radixes too wide for one int64, rows of the four columns."""

    def __init__(self, radix: _Radix, part_rows: list[int]) -> None:
        self.radix = radix
        self.bounds = np.cumsum([0, *part_rows]).tolist()  # where each part's rows start, end
        n_rows = self.bounds[-1]
        #: the keys in mixed radix (None: too wide, or consumed by distinct)
        self.flat: np.ndarray | None = np.empty(n_rows, np.int64) if radix.fits_int64 else None
        #: the keys as rows of the four columns, when too wide for flat
        self.columns: np.ndarray | None = None if radix.fits_int64 else np.empty((n_rows, 4), np.int64)

    def write(
        self, at: int, node: np.ndarray, phase: np.ndarray, label: np.ndarray, shapes: np.ndarray
    ) -> None:
        """The keys of rows ``at`` on; codes >= 0, shapes >= -1."""
        rows = slice(at, at + len(node))
        if self.flat is not None:
            key, r = self.flat[rows], self.radix
            key[:] = node  # int64 arithmetic in place: narrower columns cannot overflow
            for column, size in ((phase, r.phase), (label, r.label), (shapes, r.shapes)):
                key *= size
                key += column
            key += 1  # shapes + 1
        else:
            columns = self.columns
            assert columns is not None, "keys written after distinct()"
            for k, column in enumerate((node, phase, label, shapes)):
                columns[rows, k] = column
            columns[rows, 3] += 1

    def distinct(self) -> tuple[np.ndarray, np.ndarray]:
        """The distinct keys, ascending, as rows (node, pass, label, shapes), and the position
        of each row's key among them (as ``np.unique``, with one array of the rows' length
        besides the keys instead of four: distinct keys are few, a binary search among them is
        cheap). Consumes the keys."""
        if self.flat is None:
            columns, self.columns = self.columns, None
            assert columns is not None, "distinct() called twice"
            keys, inverse = np.unique(columns, axis=0, return_inverse=True)
            return keys - np.array([0, 0, 0, 1]), inverse.ravel()
        flat, self.flat = self.flat, None
        # the distinct keys of blocks, then of those: no sorted copy of every key
        uniq = unique(
            np.concatenate([unique(flat[lo : lo + BLOCK_EVENTS]) for lo in range(0, len(flat), BLOCK_EVENTS)])
        )
        inverse = np.searchsorted(uniq, flat)
        del flat
        r = self.radix
        shapes, rest = np.divmod(uniq, r.shapes)[::-1]
        label, rest = np.divmod(rest, r.label)[::-1]
        node, phase = np.divmod(rest, r.phase)
        return np.stack([node, phase, label, shapes - 1], axis=1), inverse


def _grouped(keys: _Keys, values: list[dict[str, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys, ascending, as rows (node, pass, label, shapes), and their sums in
    _SUMMED order (one row per key), those whose sums are all zero left out. ``values``: per
    part of ``keys``, the metrics it has (a bool array counts its true rows); the other
    metrics are zero there."""
    if keys.bounds[-1] == 0:
        return np.zeros((0, 4), np.int64), np.zeros((0, len(_SUMMED)))
    uniq, inverse = keys.distinct()
    n_keys = len(uniq)
    bounds = keys.bounds
    # each metric summed over the parts that have it, in row order: the same sums as over
    # every row with zeros for the parts without it
    sums: list[np.ndarray] = []
    for metric in _SUMMED:
        having = [k for k, part in enumerate(values) if metric in part]
        rows = [inverse[bounds[k] : bounds[k + 1]] for k in having]
        weights = [values[k][metric] for k in having]
        if len(having) > 1:
            rows, weights = [np.concatenate(rows)], [np.concatenate(weights)]
        if not having:
            sums.append(np.zeros(n_keys))
        elif weights[0].dtype == bool:  # a count: exact, as a sum of ones
            sums.append(np.bincount(rows[0][weights[0]], minlength=n_keys).astype(np.float64))
        else:
            sums.append(np.bincount(rows[0], weights=weights[0], minlength=n_keys))
    table = np.stack(sums, axis=1)
    nonzero = (table != 0).any(axis=1)
    return uniq[nonzero], table[nonzero]

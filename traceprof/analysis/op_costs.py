"""Which op events are counted, and what each costs.

**Counting rule.** Ops nest (``aten::linear`` runs ``aten::t`` and ``aten::addmm``;
``aten::conv2d`` runs ``aten::convolution``, ``aten::_convolution``, a backend op). An op is
counted when it has a formula that understands its arguments and no op around it (on its
thread) has one: the *outermost op with a formula*. Ops inside a counted op are covered by it.
Ops registered as having no cost (views, ``aten::to``, ``aten::scaled_dot_product_attention``,
autograd wrappers are not ops at all) are looked through: their children are counted.

A *composite* formula (``aten::lstm``, ``aten::gru_cell``: ops whose work is done by the ops
they run) is a fallback: the op is counted only when no op inside it is counted (on CPU a GRU
runs ``aten::linear``, ``aten::sigmoid_``..., which are counted instead; an LSTM runs
``aten::mkldnn_rnn_layer``).

**Unsupported ops.** An op without a formula (or whose arguments its formula does not
understand) that no counted op covers is *unsupported* when its work is not explained by the
ops inside it: when no op inside it is counted with FLOPs and no unsupported op is inside it
(the innermost place where FLOPs are missing), or when more than half (:data:`OWN_SHARE`) of
the GPU time launched inside it is launched by itself, not by an op inside it. The structure
decides, and on GPUs the kernels an op launches itself: never CPU time, which is noise on small
ops, so identical runs list the same ops. So an op that runs its kernels itself is reported even
when it runs a bias ``aten::add`` first. "Op" means a dispatcher op (``namespace::name``) or any
other CPU op event that launches GPU work itself (a compiled graph's ``CompiledFunction``).
Zero-FLOP ops (views, metadata, predicates, allocation: the registry's no-cost entries) are
never unsupported.

Each distinct (name, Input Dims, Input type, Concrete Inputs) combination is decoded and
evaluated once; everything else is numpy over the event columns.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

import msgspec
import numpy as np

from traceprof.analysis.link import Links
from traceprof.flops import REGISTRY, conv
from traceprof.flops.registry import FAMILIES, MATRIX_FAMILIES, Entry, Registry
from traceprof.flops.shapes import FLOATING, UNKNOWN_DTYPE, ArgumentError, OpArgs, OpCost
from traceprof.trace.columns import EventTable, Trace
from traceprof.trace.schema import Kind

#: dispatcher op names (``aten::mm``, ``c10d::allreduce_``), not autograd's own events
_OP_NAME = re.compile(r"(?!autograd::|torch::)[A-Za-z_]\w*::\w+\Z")
NOT_UNDERSTOOD = " (arguments not understood)"

_OTHER, _FORMULA, _NO_COST, _UNKNOWN_OP = 0, 1, 2, 3
#: an op without a formula is unsupported, despite counted ops inside it, when more than this
#: share of the GPU time launched inside it is launched by itself (not by the ops inside it)
OWN_SHARE = 0.5


class OpCosts(msgspec.Struct, frozen=True):
    """The counted ops of a trace (per-op arrays aligned with ``counted``) and the unsupported
    ones. No per-event Python object."""

    has_shapes: bool  # the trace's ops carry Input Dims (record_shapes=True)
    counted: np.ndarray  # int64 event indices of counted ops
    flops: np.ndarray  # float64, per counted op
    macs: np.ndarray
    bytes_read: np.ndarray
    bytes_written: np.ndarray
    dtype: np.ndarray  # int32 codes into dtypes
    family: np.ndarray  # int32 codes into FAMILIES
    dtypes: tuple[str, ...]
    unsupported: np.ndarray  # int64 event indices of unsupported ops
    unsupported_label: np.ndarray  # int32 codes into labels
    labels: tuple[str, ...]
    #: per unsupported op: its own CPU time (µs), outside the ops inside it
    unsupported_own_us: np.ndarray
    #: per event: an op, whose time (and the GPU work launched in it) is its own, not that of
    #: an op around it; the time of an unsupported op is what no such op inside it takes
    is_op: np.ndarray
    #: per counted op: the module node its cost goes to regardless of its event (-1: its
    #: event's), or None: every op's goes by its event. A compiled kernel's nodes of several
    #: modules are counted once per module (analysis.compiled)
    node: np.ndarray | None = None

    @classmethod
    def empty(cls, has_shapes: bool, n_events: int = 0) -> OpCosts:
        z = np.zeros(0)
        i = np.zeros(0, np.int64)
        c = np.zeros(0, np.int32)
        return cls(has_shapes, i, z, z, z, z, c, c, (), i, c, (), z, np.zeros(n_events, bool))


def count_ops(
    trace: Trace, links: Links, registry: Registry | None = None, exclude: np.ndarray | None = None
) -> OpCosts:
    """Cost of every counted op of ``trace`` and the unsupported ops. ``exclude``: events that
    are not ops even if they are CPU op events (module scopes recorded as ops)."""
    registry = REGISTRY if registry is None else registry
    ev = trace.events
    n = len(ev)
    is_op = ev.kind == Kind.CPU_OP
    if exclude is not None:
        is_op &= ~exclude
    if not n or not np.any(ev.input_dims[is_op] >= 0):
        return OpCosts.empty(has_shapes=False, n_events=n)

    names = _op_names(ev, is_op, registry)
    calls = _calls(trace, links, names)
    ok_key = np.array([c is not None for c in calls.costs], bool)
    ok = np.zeros(n, bool)
    ok[calls.candidates] = ok_key[calls.key]
    # composite formulas are a fallback: used only where no other formula counts inside them
    composite = ok & names.composite[ev.name]
    counts = ok & ~composite
    counts |= composite & ~_has_descendant(links, counts)

    covered = links.nearest(counts, include_self=False) >= 0
    counted = np.flatnonzero(counts & ~covered)
    ops, unsupported, unsupported_own_us = _unsupported(
        trace, links, names, calls, is_op, ok, counts, covered
    )
    return _op_costs(ev, names, calls, counted, ops, unsupported, unsupported_own_us)


class _OpNames(NamedTuple):
    """The trace's names as op names: only the names of op events are looked at."""

    #: per name: whether an op event has it
    used: list[bool]
    #: per name: its registry entry (None: none, or no op event has it)
    entries: list[Entry | None]
    #: per event: its class (_OTHER, _FORMULA, _NO_COST, _UNKNOWN_OP); _OTHER for non-ops
    cls: np.ndarray
    #: per name: whether its formula is a composite one
    composite: np.ndarray


def _op_names(ev: EventTable, is_op: np.ndarray, registry: Registry) -> _OpNames:
    """The registry entries and classes of the op events' names."""
    # the names of op events only: a trace with Python frames (with_stack) has ten thousand
    # names of functions, which no formula and no test below looks at
    op_name = np.zeros(len(ev.names), bool)
    op_name[ev.name[is_op]] = True
    named_ops = op_name.tolist()
    entries = [registry.get(name) if used else None for name, used in zip(ev.names, named_ops)]
    name_class = np.array(
        [_classify_name(name, e) if used else _OTHER for name, e, used in zip(ev.names, entries, named_ops)],
        np.int8,
    )
    cls = np.where(is_op, name_class[ev.name], _OTHER)
    composite_name = np.array([bool(e is not None and e.composite) for e in entries], bool)
    return _OpNames(named_ops, entries, cls, composite_name)


class _Calls(NamedTuple):
    """The ops with a formula (``candidates``), each one's distinct call (``key``), each
    distinct call's first op (``first``, a position in ``candidates``) and its cost."""

    candidates: np.ndarray
    key: np.ndarray
    first: np.ndarray
    costs: list[OpCost | None]


def _calls(trace: Trace, links: Links, names: _OpNames) -> _Calls:
    """Each distinct call of the ops with a formula, evaluated once (and the convolutions
    completed from their gradients)."""
    candidates = np.flatnonzero(names.cls == _FORMULA)
    key, first = _distinct_calls(trace.events, candidates)
    costs = [_evaluate(trace, names.entries, int(candidates[i])) for i in first]
    key, first = _from_gradients(trace, links, names.entries, candidates, key, first, costs)
    return _Calls(candidates, key, first, costs)


def _unsupported(
    trace: Trace,
    links: Links,
    names: _OpNames,
    calls: _Calls,
    is_op: np.ndarray,
    ok: np.ndarray,
    counts: np.ndarray,
    covered: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The op events (a mask), the unsupported ops and their own time (see the module's
    docstring); ``ok``: ops whose formula understood them, ``counts``: ops counted before
    coverage, ``covered``: events inside a counted op."""
    ev = trace.events
    n = len(ev)
    cls = names.cls
    launchers = links.parent[links.launch[links.launch >= 0]]
    launches_work = np.zeros(n, bool)
    launches_work[launchers[launchers >= 0]] = True
    # (of op events: the only ones it is asked of below)
    is_op_name = np.array(
        [used and _OP_NAME.match(name) is not None for name, used in zip(ev.names, names.used)] or [False],
        bool,
    )[ev.name]
    unknown = is_op & ~ok & (cls != _NO_COST) & (is_op_name | launches_work | (cls == _FORMULA))
    # per event: a counted op with FLOPs (its distinct call's); an op whose children carry
    # counted FLOPs is covered, whatever the timing (the structure decides, not CPU time)
    flops_of_key = np.array([c.flops if c is not None else 0.0 for c in calls.costs], np.float64)
    has_flops = np.zeros(n, bool)
    has_flops[calls.candidates] = flops_of_key[calls.key] > 0
    inside = _has_descendant(links, (counts & has_flops) | unknown)
    del has_flops
    ops = is_op & ((cls != _OTHER) | unknown)
    op_events, own_us, own_share = _own_time(trace, links, ops)
    mostly_own = np.zeros(n, bool)
    mostly_own[op_events] = own_share > OWN_SHARE
    del own_share
    unsupported = np.flatnonzero(unknown & ~covered & (~inside | mostly_own))
    unsupported_own_us = own_us[np.searchsorted(op_events, unsupported)]  # unknown ops are ops
    return ops, unsupported, unsupported_own_us


def _op_costs(
    ev: EventTable,
    names: _OpNames,
    calls: _Calls,
    counted: np.ndarray,
    ops: np.ndarray,
    unsupported: np.ndarray,
    unsupported_own_us: np.ndarray,
) -> OpCosts:
    """The OpCosts: each counted op with its distinct call's cost, the unsupported ops labelled."""
    candidates, key, first, costs = calls
    # per counted op: its distinct call's cost
    pos = np.searchsorted(candidates, counted)
    call = key[pos]
    dtypes: dict[str, int] = {}
    per_call = np.array(
        [(c.flops, c.macs, c.bytes_read, c.bytes_written) if c else (0.0,) * 4 for c in costs],
        np.float64,
    ).reshape(-1, 4)
    dtype_of_call = np.array([dtypes.setdefault(c.dtype, len(dtypes)) if c else -1 for c in costs], np.int32)
    family_of_call = np.array(
        [FAMILIES.index(names.entries[ev.name[candidates[i]]].family) for i in first], np.int32
    )
    # label: the op's name, marked when a formula exists but did not understand the arguments
    name_of = ev.name[unsupported].astype(np.int64) * 2 + (names.cls[unsupported] == _FORMULA)
    distinct, label_of = np.unique(name_of, return_inverse=True)
    labels = [ev.names[k // 2] + (NOT_UNDERSTOOD if k % 2 else "") for k in distinct.tolist()]
    return OpCosts(
        has_shapes=True,
        counted=counted,
        flops=per_call[call, 0],
        macs=per_call[call, 1],
        bytes_read=per_call[call, 2],
        bytes_written=per_call[call, 3],
        dtype=dtype_of_call[call],
        family=family_of_call[call],
        dtypes=tuple(dtypes),
        unsupported=unsupported,
        unsupported_label=label_of.ravel().astype(np.int32),
        labels=tuple(labels),
        unsupported_own_us=unsupported_own_us,
        is_op=ops,
    )


def _classify_name(name: str, entry: Entry | None) -> int:
    if entry is not None:
        return _FORMULA if entry.has_cost else _NO_COST
    return _UNKNOWN_OP if _OP_NAME.match(name) else _OTHER


def _distinct_calls(ev: EventTable, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each event, the index of its distinct (name, dims, types, concrete) call, and for
    each distinct call the position of its first event."""
    if len(events) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    key = ev.name[events].astype(np.int64)
    for column in (ev.input_dims, ev.input_types, ev.concrete_inputs):
        _, key = np.unique(key, return_inverse=True)
        key = key.ravel().astype(np.int64) << 32 | (column[events].astype(np.int64) + 1)
    _, first, key = np.unique(key, return_index=True, return_inverse=True)
    return key.ravel(), first


def _evaluate(trace: Trace, entries: Sequence[Entry | None], event: int) -> OpCost | None:
    entry: Entry | None = entries[trace.events.name[event]]
    if entry is None or entry.formula is None:  # not a candidate: every candidate has a formula
        return None
    try:
        args = _args(trace, event)
    except (ArgumentError, ValueError, IndexError, TypeError, KeyError, ZeroDivisionError):
        return None
    return cost_of(entry, args)


def _args(trace: Trace, event: int) -> OpArgs:
    """The decoded arguments of one op event."""
    ev = trace.events
    texts = ev.texts

    def text(code: int) -> bytes | None:
        return texts[code] if code >= 0 else None

    return OpArgs.decode(
        ev.names[ev.name[event]],
        text(ev.input_dims[event]),
        text(ev.input_types[event]),
        text(ev.concrete_inputs[event]),
    )


def _from_gradients(
    trace: Trace,
    links: Links,
    entries: Sequence[Entry | None],
    candidates: np.ndarray,
    key: np.ndarray,
    first: np.ndarray,
    costs: list[OpCost | None],
) -> tuple[np.ndarray, np.ndarray]:
    """Convolutions of traces without Concrete Inputs (no stride, padding, dilation): a forward
    convolution takes its output's size from the gradient of its output, a weight gradient its
    weight's shape from the forward op, joined by autograd (the backward ops inside the backward
    node that the forward op created). Each such op its own distinct call, appended to
    ``costs``; returns the new ``key`` and ``first``."""
    ev = trace.events
    failed_rows = np.flatnonzero(np.array([c is None for c in costs], bool)[key])
    gradient_arg = np.array([conv.GRADIENT_ARG.get(s, -1) for s in ev.names], np.int64)
    backward = np.flatnonzero(gradient_arg[ev.name] >= 0)
    if not len(failed_rows) or not len(backward):
        return key, first
    node = links.backward_node[backward]
    forward = np.where(node >= 0, links.forward_op[np.maximum(node, 0)], -1)
    # only pairs with a failed forward convolution or a failed weight gradient
    failed = np.zeros(len(ev), bool)
    failed[candidates[failed_rows]] = True
    is_forward = np.array([s in conv.FORWARD_CONVOLUTIONS for s in ev.names], bool)
    is_weight = np.array([s in conv.WEIGHT_GRADIENTS for s in ev.names], bool)
    at = np.maximum(forward, 0)
    wanted = (forward >= 0) & (
        (failed[at] & is_forward[ev.name[at]]) | (failed[backward] & is_weight[ev.name[backward]])
    )
    pairs = list(zip(backward[wanted].tolist(), forward[wanted].tolist()))
    row_of = dict(zip(candidates[failed_rows].tolist(), failed_rows.tolist()))
    grads: dict[int, tuple[int, ...]] = {}  # forward op -> the gradient of its output
    weights: dict[int, tuple[int, ...]] = {}  # forward op -> its weight's shape
    for b, f in pairs:
        try:
            grads.setdefault(f, _args(trace, b).shape(int(gradient_arg[ev.name[b]])))
            weights.setdefault(f, _args(trace, f).shape(1))
        except (ArgumentError, ValueError, IndexError, TypeError):
            continue
    todo = [(f, f) for f in grads if ev.names[ev.name[f]] in conv.FORWARD_CONVOLUTIONS]
    todo += [(b, f) for b, f in pairs if ev.names[ev.name[b]] in conv.WEIGHT_GRADIENTS and f in weights]
    key, first_rows = key.copy(), first.tolist()
    known: dict[tuple[int, str], int] = {}  # the same cost of the same op: one distinct call
    for event, f in todo:
        entry = entries[ev.name[event]]
        if event not in row_of or entry is None:
            continue
        try:
            args = _args(trace, event)
            if event == f:
                found = conv.conv_given_gradient(args, grads[f])
            else:
                found = conv.weight_gradient_given_weight(args, weights[f])
        except (ArgumentError, ValueError, IndexError, TypeError):
            continue
        distinct = (int(ev.name[event]), repr(found))
        if distinct not in known:
            known[distinct] = len(costs)
            costs.append(_checked(entry, found))
            first_rows.append(row_of[event])
        key[row_of[event]] = known[distinct]
    return key, np.array(first_rows, np.int64)


def cost_of(entry: Entry, args: OpArgs) -> OpCost | None:
    """The cost of one call of ``entry``'s op with ``args``; None when its formula does not
    understand them (or it has none)."""
    if entry.formula is None:
        return None
    try:
        cost = entry.formula(args)
    except (ArgumentError, ValueError, IndexError, TypeError, KeyError, ZeroDivisionError):
        return None
    return _checked(entry, cost)


def _checked(entry: Entry, cost: OpCost) -> OpCost | None:
    """``cost`` of an op of ``entry``; None when not finite; no FLOPs outside the matrix
    families on integers and booleans."""
    if not all(np.isfinite((cost.flops, cost.macs, cost.bytes_read, cost.bytes_written))):
        return None
    if entry.family not in MATRIX_FAMILIES and cost.dtype not in FLOATING | {UNKNOWN_DTYPE}:
        # integer counters and boolean masks: bytes, but no floating-point operations
        return OpCost(0.0, 0.0, cost.bytes_read, cost.bytes_written, cost.dtype)
    return cost


def _own_time(trace: Trace, links: Links, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``ops`` events (ascending) and, per op: its own CPU time (µs) outside the ops nested
    in it, and the share of the GPU time launched inside it that it launched itself, not
    through an op inside it (0 when none was launched: CPU time, noisy on small ops, decides
    nothing). Arrays of the ops, not of every event: only ops are asked about."""
    ev = trace.events
    n = len(ev)
    op_events = np.flatnonzero(ops)
    n_ops = len(op_events)
    cpu = np.nan_to_num(np.maximum(links.nest_end[op_events] - ev.ts[op_events], 0.0))
    around = links.nearest(ops, include_self=False)[op_events]
    inner = around >= 0
    # ops nest in ops: positions in op_events, in the order of the events as before
    in_ops = np.bincount(np.searchsorted(op_events, around[inner]), weights=cpu[inner], minlength=n_ops)
    del around, inner
    own_cpu = np.maximum(cpu - in_ops, 0.0)
    del cpu, in_ops

    work = links.anchor >= 0
    anchor = links.anchor[work]
    gpu = np.nan_to_num(np.maximum(ev.dur[links.gpu_work[work]], 0.0))
    owner = links.nearest(ops)[anchor]
    mine = owner >= 0
    own_gpu = np.bincount(np.searchsorted(op_events, owner[mine]), weights=gpu[mine], minlength=n_ops)
    # GPU time launched anywhere inside each slice: summed up the levels over every slice
    total_gpu = np.bincount(anchor, weights=gpu, minlength=n)
    for level in reversed(links.levels[1:] if len(anchor) else ()):
        np.add.at(total_gpu, links.parent[level], total_gpu[level])
    total_gpu = total_gpu[op_events]
    gpu_share = np.divide(own_gpu, total_gpu, out=np.zeros(n_ops), where=total_gpu > 0)
    return op_events, own_cpu, gpu_share


def _has_descendant(links: Links, mark: np.ndarray) -> np.ndarray:
    """Per event: some CPU slice nested inside it (at any depth) is marked."""
    inside = np.zeros(len(mark), bool)
    for level in reversed(links.levels[1:]):
        up = level[mark[level] | inside[level]]
        inside[links.parent[up]] = True
    return inside

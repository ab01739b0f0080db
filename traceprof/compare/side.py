"""One side of a diff: a trace's profile, plus what the diff needs beyond it.

:func:`side_of` analyzes a trace as ``traceprof analyze`` does (the mean over its complete steps)
and adds, from the same trace and the attribution's classification of every work item (node and
pass, :meth:`traceprof.analysis.classify.Context.classify`):

- per selected step, the time of every module node and pass (and of the step), for the
  step-to-step spread that tells a change from noise;
- per module node and pass, the time of each kernel (GPU traces) or op (CPU-only traces)
  inside the node's subtree, for "what changed inside it".

The time is GPU busy time (concurrency-shared, as the profile's) on traces with GPU work, else
the exclusive CPU time of the slices. Only small tables leave this module, so both sides of a
diff can be computed in separate processes.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from traceprof.analysis.labels import BETWEEN_OPS_LABEL, MODULE_CODE
from traceprof.compare.sides import BUCKET_PATH, Side, checked_side, side_entry, side_named
from traceprof.read import cache as trace_cache
from traceprof.read.build import load_keyed
from traceprof.read.cache import cache_store
from traceprof.result.metric import TimeMetric
from traceprof.result.model import PASSES, ModuleProfile
from traceprof.trace import schema
from traceprof.trace.columns import Trace

if TYPE_CHECKING:
    from traceprof.analysis.classify import Context
    from traceprof.read.load import Progress

#: the passes: pass codes index PASSES
N_PASSES = len(PASSES)
#: what a work item's label is: its own name, a module's own CPU time outside every op (its
#: Python code), or a step's CPU time between its top-level slices
_KIND_NAME, _KIND_MODULE_CODE, _KIND_BETWEEN_OPS = 0, 1, 2
_KINDS = 3
_SPECIAL = {_KIND_MODULE_CODE: MODULE_CODE, _KIND_BETWEEN_OPS: BETWEEN_OPS_LABEL}


def side_of(
    source: Trace | str | os.PathLike,
    *,
    hierarchy=None,
    max_memory=None,
    cache=None,
    content=None,
    step: int | None = None,
    progress: Progress | None = None,
) -> Side:
    """Analyze ``source`` (a :class:`Trace` or a path) for a diff. A path's side comes from the
    cache when it is there, else it is computed and written there (``cache``: see
    :func:`traceprof.load_trace`): a CI baseline is analyzed once. ``content``: the file's
    content hash, when the caller has it. ``step``: that ProfilerStep alone (default: the mean
    of the complete steps, as ``traceprof analyze``). ``progress``: called with each stage
    (reading, decoding, indexing, attributing), as :func:`traceprof.analyze`'s."""
    if isinstance(source, Trace):
        return _side_of_trace(source, hierarchy, step, progress)
    store = cache_store(cache)
    if store is not None and content is None:
        content = trace_cache.content_hash(source)

    def computed() -> tuple[Side, str | None]:
        trace, read = load_keyed(source, progress, max_memory=max_memory, cache=cache, content=content)
        return _side_of_trace(trace, hierarchy, step, progress), read

    if store is None or content is None:
        return computed()[0]
    return trace_cache.cached(
        store,
        content,
        lambda read: side_entry(read, hierarchy, step),
        "side",
        Side,
        computed,
        lambda hit: side_named(hit, str(source)),
        checked_side,
    )[0]


def _side_of_trace(
    trace: Trace, hierarchy, step: int | None = None, progress: Progress | None = None
) -> Side:
    from traceprof.analysis.attribution import attributed

    if progress:
        progress(f"attributing {trace.metadata.path or 'the trace'}")
    return _side(*attributed(trace, hierarchy=hierarchy, step=step))


class _Work(NamedTuple):
    """The work items of the selected steps that a side sums: GPU work items (GPU traces) or CPU
    slices (CPU-only traces)."""

    weight: np.ndarray  # its time: GPU busy time (concurrency-shared) or exclusive CPU time
    node: np.ndarray  # its module node (n: not in any module, n the number of module nodes)
    pass_code: np.ndarray  # its pass, a PASSES index
    label: np.ndarray  # the code of its name
    special: np.ndarray  # _KIND_NAME, or the time outside ops it is (_KIND_MODULE_CODE, _KIND_BETWEEN_OPS)
    slot: np.ndarray  # its step among the selected ones


def _gpu_work(ctx: Context) -> _Work:
    """Every GPU work item in the selected step holding its launch (or its start), with its share
    of GPU busy time, through the node and pass its launch is classified in."""
    from traceprof.analysis.gpu_work import shared_busy_time  # looked up when used

    ev, links = ctx.trace.events, ctx.links
    work, anchor = links.gpu_work, links.anchor
    when = np.where(anchor >= 0, ev.ts[np.maximum(anchor, 0)], ev.ts[work])
    slot = _slots(ctx, when)
    keep = slot >= 0
    weight, label = shared_busy_time(ev, work)[keep], ev.name[work[keep]].astype(np.int64)
    node, _, pass_code = ctx.classify(anchor[keep])  # the attribution's own node and pass
    return _Work(weight, node, pass_code, label, np.full(len(label), _KIND_NAME, np.int64), slot[keep])


def _cpu_work(ctx: Context) -> _Work:
    """Every CPU slice of the selected steps with its exclusive time (the attribution's
    :func:`~traceprof.analysis.cpu_time.cpu_time`): a module scope's own time is its module's
    code, a step's its time between ops."""
    from traceprof.analysis.cpu_time import cpu_time  # looked up when used

    ev, cpu = ctx.trace.events, cpu_time(ctx)
    slot = _slots(ctx, ev.ts[cpu.events])
    keep = slot >= 0  # all of them: the same steps
    events = cpu.events[keep]
    special = np.where(
        ctx.tree.scope_mask[events],
        _KIND_MODULE_CODE,
        np.where(ctx.is_step[events], _KIND_BETWEEN_OPS, _KIND_NAME),
    )
    label = ev.name[events].astype(np.int64)
    return _Work(cpu.exclusive_us[keep], cpu.node[keep], cpu.pass_code[keep], label, special, slot[keep])


def _slots(ctx: Context, when: np.ndarray) -> np.ndarray:
    """The position among the selected steps of the step holding each time (-1: none); 0 for
    every finite time when the whole trace counts."""
    if not len(ctx.selected):
        return np.where(np.isfinite(when), 0, -1)
    pos = ctx.steps.of_time(when)
    slot_of_pos = np.full(len(ctx.steps.numbers) + 1, -1, np.int64)
    slot_of_pos[ctx.selected] = np.arange(len(ctx.selected))
    return np.where(pos >= 0, slot_of_pos[np.maximum(pos, 0)], -1)


def _side(profile: ModuleProfile, ctx: Context) -> Side:
    """The side of a trace from its profile and the context the profile was attributed in."""
    tree, steps, selected = ctx.tree, ctx.steps, ctx.selected
    work = _gpu_work(ctx) if profile.has_gpu else _cpu_work(ctx)
    n_mod, n_sel = len(tree.nodes), max(len(selected), 1)
    node = np.where(work.node >= 0, work.node, n_mod)  # n_mod: not in any module
    parent = np.array([h.parent for h in tree.nodes] + [-1], np.int64)
    paths = [h.path for h in tree.nodes] + [BUCKET_PATH]
    per = _step_totals(work.weight, work.slot, node, work.pass_code, n_sel, parent)
    node_steps = {
        (paths[i], p): tuple(float(x) for x in per[:, i, p])
        for i in range(n_mod + 1)
        for p in range(N_PASSES)
    }
    inside, labels = _inside(work, node, n_sel, parent, paths, ctx.trace.events.names)
    if len(selected):
        wall = tuple(float(x) for x in (steps.end[selected] - steps.start[selected]))
        numbers = tuple(int(x) for x in steps.numbers[selected])
    else:
        wall = (profile.selection.wall_us,)
        numbers = ()
    roots = [i for i in range(n_mod + 1) if parent[i] < 0]
    return Side(
        path=profile.metadata.path,
        profile=profile,
        metric=TimeMetric.of(profile.has_gpu),
        step_numbers=numbers,
        step_wall_us=wall,
        step_time_us=tuple(float(x) for x in per[:, :, :].sum(axis=2)[:, roots].sum(axis=1)),
        node_steps=node_steps,
        inside=inside,
        labels=labels,
        label_kind="kernel" if profile.has_gpu else "op",
    )


def _step_totals(
    weight: np.ndarray,
    slot: np.ndarray,
    node: np.ndarray,
    pass_code: np.ndarray,
    n_sel: int,
    parent: np.ndarray,
) -> np.ndarray:
    """The time of every selected step, node (its subtree's:
    :func:`~traceprof.analysis.node_metrics.subtree_totals_of`) and pass: [step, node, pass]."""
    from traceprof.analysis.node_metrics import subtree_totals_of  # looked up when used

    n = len(parent)
    flat = (slot * n + node) * N_PASSES + pass_code
    own = np.bincount(flat, weights=weight, minlength=n_sel * n * N_PASSES).reshape(n_sel, n, N_PASSES)
    rows = own.transpose(0, 2, 1).reshape(n_sel * N_PASSES, n)  # [step and pass, node]
    total = subtree_totals_of({"time": rows}, parent)["time"]
    return np.ascontiguousarray(total.reshape(n_sel, N_PASSES, n).transpose(0, 2, 1))


def _inside(
    work: _Work,
    node: np.ndarray,
    n_sel: int,
    parent: np.ndarray,
    paths: list[tuple[str, ...]],
    names: tuple[str, ...],
) -> tuple[dict[tuple[tuple[str, ...], int], dict[str, float]], dict[str, float]]:
    """Per node and pass, the time per step of each label inside its subtree (pushed up to every
    ancestor); and per label, its time per step in the whole selection."""
    text: dict[int, str] = {}

    def name_of(code: int, kind: int) -> str:
        if kind != _KIND_NAME:
            return _SPECIAL[kind]
        if code not in text:
            text[code] = schema.op_label(names[code])
        return text[code]

    key = (node * N_PASSES + work.pass_code) * _KINDS + work.special
    combined = key * (len(names) + 1) + work.label
    uniq, inverse = np.unique(combined, return_inverse=True)
    sums = np.bincount(inverse.ravel(), weights=work.weight, minlength=len(uniq)) / n_sel
    inside: dict[tuple[tuple[str, ...], int], dict[str, float]] = {}
    labels: dict[str, float] = {}
    for u, s in zip(uniq.tolist(), sums.tolist()):
        k, code = divmod(u, len(names) + 1)
        np_, kind = divmod(k, _KINDS)
        n, p = divmod(np_, N_PASSES)
        name = name_of(code, kind)
        labels[name] = labels.get(name, 0.0) + s
        while n >= 0:
            bucket = inside.setdefault((paths[n], p), {})
            bucket[name] = bucket.get(name, 0.0) + s
            n = int(parent[n])
    return inside, labels

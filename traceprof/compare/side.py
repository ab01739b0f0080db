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
from typing import TYPE_CHECKING

import msgspec
import numpy as np

from traceprof.read import cache as trace_cache
from traceprof.read.build import load_keyed
from traceprof.read.cache import cache_store
from traceprof.result.metric import TimeMetric
from traceprof.result.model import UNATTRIBUTED_NAME, ModuleProfile
from traceprof.trace import schema
from traceprof.trace.model import Trace

if TYPE_CHECKING:
    from traceprof.analysis.classify import Context
    from traceprof.read.load import Progress

#: label of a module's own CPU time outside every op (the Python code of its forward)
MODULE_CODE = "(module code)"
#: label of a step's CPU time between its top-level slices
BETWEEN_OPS = "(between ops)"
BUCKET_PATH = (UNATTRIBUTED_NAME,)


class Side(msgspec.Struct, frozen=True):
    """A trace analyzed for a diff. Paths are :attr:`ModuleNode.path` (the bucket's is
    ``("(not in any module)",)``); pass codes index :data:`traceprof.result.model.PASSES`."""

    path: str
    profile: ModuleProfile
    metric: TimeMetric  # GPU busy time on traces with GPU work, else CPU time
    step_numbers: tuple[int, ...]  # the selected steps (empty: the whole trace)
    step_wall_us: tuple[float, ...]  # wall time of each selected step
    step_time_us: tuple[float, ...]  # the metric of each selected step
    #: (path, pass code) -> the node's total metric in each selected step
    node_steps: dict[tuple[tuple[str, ...], int], tuple[float, ...]]
    #: (path, pass code) -> {kernel or op name: metric per step inside the node's subtree}
    inside: dict[tuple[tuple[str, ...], int], dict[str, float]]
    #: kernel or op name -> metric per step, all work of the selection
    labels: dict[str, float]
    label_kind: str  # "kernel" or "op"


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
        lambda read: _entry(read, hierarchy, step),
        "side",
        Side,
        computed,
        lambda hit: _named(hit, str(source)),
        _checked,
    )[0]


def _checked(side: Side) -> None:
    """A side read from the cache, checked as untrusted input (Store.get)."""
    side.profile.check_links()


def _entry(content: str, hierarchy, step: int | None) -> str:
    """The cache entry of a side: the trace's content, the hierarchy and the step asked for."""
    source = str(getattr(hierarchy, "value", hierarchy))
    # the entries of the mean of the steps keep their name
    return trace_cache.entry_name(content, "side", source if step is None else (source, step))


def cached_sides(
    sources: list[str | os.PathLike],
    *,
    hierarchy=None,
    cache=None,
    step: int | None = None,
    progress: Progress | None = None,
) -> list[tuple[Side | None, str | None]]:
    """The side of each of ``sources`` in the cache (None: not there; nothing is computed), and
    the file's content hash (None: no cache) for :func:`side_of` to reuse. The files are hashed
    at once, in threads."""
    store = cache_store(cache)
    if store is None or not sources:
        return [(None, None)] * len(sources)
    if progress:
        progress("looking the traces up in the cache")
    out: list[tuple[Side | None, str | None]] = []
    for source, content in zip(sources, trace_cache.content_hashes([str(s) for s in sources])):
        hit = (
            store.get(_entry(content, hierarchy, step), "side", Side, _checked)
            if content is not None
            else None
        )
        out.append(((_named(hit, str(source)) if hit is not None else None), content))
    return out


def _side_of_trace(
    trace: Trace, hierarchy, step: int | None = None, progress: Progress | None = None
) -> Side:
    from traceprof.analysis.attribution import attributed

    if progress:
        progress(f"attributing {trace.metadata.path or 'the trace'}")
    return _side(*attributed(trace, hierarchy=hierarchy, step=step))


def _named(side: Side, path: str) -> Side:
    """A cached side with its trace's path as the caller spelled it."""
    if side.path == path:
        return side
    return msgspec.structs.replace(side, path=path, profile=side.profile.with_path(path))


def _side(profile: ModuleProfile, ctx: Context) -> Side:
    """The side of a trace from its profile and the context the profile was attributed in."""
    from traceprof.analysis.gpu_work import shared_busy_time  # looked up when used

    trace, links, tree, steps, selected = ctx.trace, ctx.links, ctx.tree, ctx.steps, ctx.selected
    ev = trace.events
    has_gpu = profile.has_gpu
    if has_gpu:
        work = links.gpu_work
        events = links.anchor
        when = np.where(events >= 0, ev.ts[np.maximum(events, 0)], ev.ts[work])
        weight = shared_busy_time(ev, work)
        label = ev.name[work].astype(np.int64)
        special = np.zeros(len(work), np.int64)
    else:
        cpu = np.flatnonzero(links.depth >= 0)
        span = links.nest_end - ev.ts
        child = (
            np.bincount(
                np.maximum(links.parent[cpu], 0),
                weights=np.where(links.parent[cpu] >= 0, span[cpu], 0),
                minlength=len(ev),
            )
            if len(cpu)
            else np.zeros(len(ev))
        )
        weight = np.maximum(span[cpu] - child[cpu], 0.0)
        events, when = cpu, ev.ts[cpu]
        label = ev.name[cpu].astype(np.int64)
        is_step_name = ev.named(lambda s: schema.STEP_RE.match(s) is not None)
        special = np.where(tree.scope_mask[cpu], 1, np.where(is_step_name[cpu], 2, 0))
    # the selection: each item in the step holding its launch (or start)
    n_sel = max(len(selected), 1)
    if len(selected):
        pos = steps.of_time(when)
        slot_of_pos = np.full(len(steps.numbers) + 1, -1, np.int64)
        slot_of_pos[selected] = np.arange(len(selected))
        slot = np.where(pos >= 0, slot_of_pos[np.maximum(pos, 0)], -1)
    else:
        slot = np.where(np.isfinite(when), 0, -1)
    keep = slot >= 0
    events, weight, label, special, slot = (a[keep] for a in (events, weight, label, special, slot))
    n_mod = len(tree.nodes)
    node, _, phase = ctx.classify(events)  # the attribution's own node and pass of each event
    node = np.where(node >= 0, node, n_mod)  # n_mod: not in any module

    parent = np.array([h.parent for h in tree.nodes] + [-1], np.int64)
    paths = [h.path for h in tree.nodes] + [BUCKET_PATH]
    # per step, node and pass; then subtree totals
    flat = (slot * (n_mod + 1) + node) * 3 + phase
    per = np.bincount(flat, weights=weight, minlength=n_sel * (n_mod + 1) * 3)
    per = per.reshape(n_sel, n_mod + 1, 3)
    depth = np.zeros(n_mod + 1, np.int64)
    for i in range(n_mod):
        if parent[i] >= 0:
            depth[i] = depth[parent[i]] + 1
    for i in np.argsort(-depth, kind="stable"):
        if parent[i] >= 0:
            per[:, parent[i], :] += per[:, i, :]
    node_steps = {
        (paths[i], p): tuple(float(x) for x in per[:, i, p]) for i in range(n_mod + 1) for p in range(3)
    }

    # inside each node: per label, pushed up to every ancestor
    names = ev.names
    text = {}

    def name_of(code: int, kind: int) -> str:
        if kind == 1:
            return MODULE_CODE
        if kind == 2:
            return BETWEEN_OPS
        if code not in text:
            text[code] = schema.op_label(names[code])
        return text[code]

    key = (node * 3 + phase) * 3 + special
    combined = key * (len(names) + 1) + label
    uniq, inverse = np.unique(combined, return_inverse=True)
    sums = np.bincount(inverse.ravel(), weights=weight, minlength=len(uniq)) / n_sel
    inside: dict = {}
    labels: dict = {}
    for u, s in zip(uniq.tolist(), sums.tolist()):
        k, code = divmod(u, len(names) + 1)
        np_, kind = divmod(k, 3)
        n, p = divmod(np_, 3)
        name = name_of(code, kind)
        labels[name] = labels.get(name, 0.0) + s
        while n >= 0:
            bucket = inside.setdefault((paths[n], p), {})
            bucket[name] = bucket.get(name, 0.0) + s
            n = int(parent[n])
    if len(selected):
        wall = tuple(float(x) for x in (steps.end[selected] - steps.start[selected]))
        numbers = tuple(int(x) for x in steps.numbers[selected])
    else:
        wall = (profile.selection.wall_us,)
        numbers = ()
    step_time = tuple(
        float(x)
        for x in per[:, :, :].sum(axis=2)[:, [i for i in range(n_mod + 1) if parent[i] < 0]].sum(axis=1)
    )
    return Side(
        path=profile.metadata.path,
        profile=profile,
        metric=TimeMetric.of(has_gpu),
        step_numbers=numbers,
        step_wall_us=wall,
        step_time_us=step_time,
        node_steps=node_steps,
        inside=inside,
        labels=labels,
        label_kind="kernel" if has_gpu else "op",
    )

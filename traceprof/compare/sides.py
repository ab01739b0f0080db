"""A diff's side as the cache keeps it: the :class:`Side` record, and its entries looked up
(:func:`cached_sides`). Computing a side (:mod:`traceprof.compare.side`) needs numpy, the
decoder and the analysis; a diff whose sides are in the cache needs none of them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import msgspec

from traceprof.read import cache as trace_cache
from traceprof.read.cache import cache_store
from traceprof.result.metric import TimeMetric
from traceprof.result.model import UNATTRIBUTED_NAME, ModuleProfile

if TYPE_CHECKING:
    from traceprof.read.load import Progress

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


def checked_side(side: Side) -> None:
    """A side read from the cache, checked as untrusted input (Store.get)."""
    side.profile.check_links()


def side_entry(content: str, hierarchy, step: int | None) -> str:
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
            store.get(side_entry(content, hierarchy, step), "side", Side, checked_side)
            if content is not None
            else None
        )
        out.append(((side_named(hit, str(source)) if hit is not None else None), content))
    return out


def side_named(side: Side, path: str) -> Side:
    """A cached side with its trace's path as the caller spelled it."""
    if side.path == path:
        return side
    return msgspec.structs.replace(side, path=path, profile=side.profile.with_path(path))

"""Diff of two traces: which module got slower between two runs, and what changed inside it.

Nodes are matched by key (docs/diff.md):

- traces whose module tree comes from traceprof scopes or Lightning scopes: the qualified name
  and class (``layer1.0.conv1`` of class ``Conv2d``);
- other sources (``nn.Module`` python_function events, annotations), or two traces whose
  sources differ: the tree path of class names with each class's call order among its
  siblings (``GPT#0/ModuleDict#0/Block#2``);
- outside the modules: ``(not in any module)`` and its groups by name.

A node present on one side only is *added* or *removed*: a renamed or moved module is one of
each, never matched by guess (:mod:`traceprof.compare.match`). Per node and pass (forward,
backward, other) a :class:`~traceprof.compare.nodes.PassDelta` holds the time base -> new (GPU
busy time, CPU time on CPU-only traces), FLOPs, kernels, achieved FLOP/s and memory, and, with
several steps per trace, the step-to-step spread: a change within the spread is marked as noise.

This module reads the two sides (:mod:`traceprof.compare.side`, in parallel processes when they
are large) and returns their :class:`~traceprof.compare.model.DiffProfile`: :func:`diff` of two
traces, :func:`diff_jobs` of two jobs.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from msgspec.structs import replace

from traceprof import options
from traceprof.compare.match import compare
from traceprof.compare.model import DiffProfile
from traceprof.compare.shape import DEFAULT_SORT
from traceprof.compare.sides import Side, cached_sides
from traceprof.errors import OptionError
from traceprof.trace.model import is_trace

if TYPE_CHECKING:
    from traceprof.progress import Progress
    from traceprof.result.shaping import SortKey
    from traceprof.result.sources import Source
    from traceprof.trace.columns import Trace

#: exit code of ``traceprof diff --fail-if-slower`` when the new run is slower than allowed
SLOWER_EXIT_CODE = 10
#: traces analyzed in parallel processes when together larger than this (smaller ones take less
#: time than starting a process)
PARALLEL_FROM_BYTES = 20_000_000


def diff(
    base: Trace | Side | str | os.PathLike,
    new: Trace | Side | str | os.PathLike,
    *,
    hierarchy: Source | str | None = None,
    max_memory: int | str | None = None,
    parallel: bool = True,
    cache: bool | None = None,
    step: int | None = None,
    depth: int | None = None,
    top: int | None = None,
    sort: SortKey | str | None = None,
    ignore: tuple[str, ...] | list[str] = (),
    progress: Progress | None = None,
) -> DiffProfile:
    """Compare two traces (paths, :class:`Trace` objects or sides from
    :func:`traceprof.compare.side.side_of`): per module and pass, base -> new.

    Two paths are analyzed in two processes at once when ``parallel`` (each returns only its
    small tables). ``cache``: read the paths' decoded traces from the cache, and write them there
    (default: unless ``$TRACEPROF_CACHE`` is ``off``; see :mod:`traceprof.read.cache`).
    ``step``: compare that ProfilerStep of each trace (the same number in both) instead of the
    mean of their complete steps. ``depth``, ``top``, ``sort``, ``ignore``: the result
    :meth:`DiffProfile.shaped <traceprof.compare.model.DiffProfile.shaped>` (``sort`` None: the
    diff's default, ``gpu``, the size of the change of the diff's time, largest first, as
    ``traceprof diff`` sorts; an unshaped diff's siblings are in that order too). ``progress``:
    called with what the diff is doing (the stages of each trace analyzed in this process, as
    :func:`traceprof.analyze`'s)."""
    # checked and made plain int once, as the command line does (numpy.int64(2) is 2)
    step = options.argument("step", step, int, min=0)
    depth = options.argument("depth", depth, int, min=0)
    top = options.argument("top", top, int, min=1)
    sides = _sides([base, new], hierarchy, max_memory, parallel, cache, step, progress)
    if progress:
        progress("comparing")
    return _shaped(compare(*sides), depth, top, sort, ignore)


def _shaped(result: DiffProfile, depth, top, sort, ignore) -> DiffProfile:
    if depth is None and top is None and sort is None and not ignore:
        return result
    return result.shaped(depth=depth, top=top, sort=sort or DEFAULT_SORT, ignore=ignore)


def _sides(items, hierarchy, max_memory, parallel, cache=None, step=None, progress=None) -> list[Side]:
    """Each item as a :class:`Side`; the paths among them analyzed by the local engine's process
    pool (one worker per trace, at most the CPUs) when ``parallel``."""
    out = list(items)
    # sides in the cache (a CI baseline): the rest has the cores; content hashes computed once
    given = [i for i, x in enumerate(items) if not isinstance(x, Side) and not is_trace(x)]
    contents: dict[int, str | None] = {}
    found = cached_sides(
        [items[i] for i in given], hierarchy=hierarchy, cache=cache, step=step, progress=progress
    )
    for i, (hit, content) in zip(given, found):
        out[i], contents[i] = hit or items[i], content
    paths = [i for i, x in enumerate(out) if not isinstance(x, Side) and not is_trace(x)]
    if parallel and len(paths) > 1 and _size(items[i] for i in paths) > PARALLEL_FROM_BYTES:
        from traceprof.engine import LocalEngine, default_jobs

        engine = LocalEngine(min(len(paths), default_jobs()))
        if progress:
            progress(
                f"analyzing {' and '.join(os.path.basename(str(items[i])) for i in paths)}, a process each"
            )
        got = engine.map(
            _side_task,
            [(str(items[i]), hierarchy, max_memory, cache, contents.get(i), step) for i in paths],
        )
        for i, side in zip(paths, got):
            out[i] = side
    for i, x in enumerate(out):
        if not isinstance(x, Side):
            from traceprof.compare.side import side_of  # computing: a diff of cached sides needs none of it

            out[i] = side_of(
                x,
                hierarchy=hierarchy,
                max_memory=max_memory,
                cache=cache,
                content=contents.get(i),
                step=step,
                progress=progress,
            )
    return out


def _size(paths) -> int:
    total = 0
    for p in paths:
        try:
            total += os.path.getsize(p)
        except OSError:
            pass
    return total


def _side_task(task) -> Side:
    from traceprof.compare.side import side_of

    path, hierarchy, max_memory, cache, content, step = task
    return side_of(path, hierarchy=hierarchy, max_memory=max_memory, cache=cache, content=content, step=step)


def diff_jobs(
    base_dir: str | os.PathLike,
    new_dir: str | os.PathLike,
    *,
    hierarchy: Source | str | None = None,
    max_memory: int | str | None = None,
    step: int | None = None,
    progress: Progress | None = None,
) -> DiffProfile:
    """Compare two jobs (directories of one trace per rank, found as ``traceprof analyze`` finds
    them: :func:`traceprof.read.discovery.find_traces`): rank by rank; the result is the diff of the rank
    whose step changed most, with every rank's step change in its warnings, unshaped
    (:meth:`DiffProfile.shaped <traceprof.compare.model.DiffProfile.shaped>` shapes it).
    ``step``, ``progress``: as :func:`diff`'s."""
    from traceprof.read.discovery import find_traces

    step = options.argument("step", step, int, min=0)
    hierarchy = None if hierarchy == "auto" else hierarchy
    sides = []
    for d in (base_dir, new_dir):
        paths = find_traces([str(d)])
        got = _sides(paths, hierarchy, max_memory, parallel=True, step=step, progress=progress)
        by_rank = {}
        for s in got:
            rank = s.profile.metadata.rank
            by_rank[rank if rank is not None else 0] = s
        if len(by_rank) != len(got):
            raise OptionError(f"{d}: several traces of one rank; give one trace per rank")
        sides.append(by_rank)
    common = sorted(set(sides[0]) & set(sides[1]))
    if not common:
        raise OptionError(f"{base_dir} and {new_dir} have no rank in common")
    if progress:
        progress("comparing")
    diffs = {r: compare(sides[0][r], sides[1][r]) for r in common}
    worst = max(common, key=lambda r: (abs(diffs[r].wall_delta_us), -r))
    from traceprof import units

    notes = [
        f"jobs compared rank by rank ({len(common)} ranks in common); shown: rank {worst}, "
        "the largest step change; steps per rank: "
        + ", ".join(f"rank {r} {units.signed_duration(diffs[r].wall_delta_us)}" for r in common)
    ]
    only = sorted(set(sides[0]) ^ set(sides[1]))
    if only:
        notes.append("ranks in one job only: " + ", ".join(map(str, only)))
    shown = diffs[worst]

    return replace(shown, warnings=tuple(notes) + shown.warnings)

"""One rank of a job: what an engine's worker computes and sends back (:func:`analyze_rank`), and
each rank's result looked up in, or written to, the cache of the machine it runs on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from traceprof.errors import MemoryLimitError
from traceprof.read.limits import shared_limit_error
from traceprof.result.model import ModuleProfile
from traceprof.result.step_times import StepTimeline

if TYPE_CHECKING:
    from traceprof.read.cache import Store


class RankOptions(msgspec.Struct, frozen=True):
    """How each rank's trace is analyzed (the same for every rank)."""

    step: int | None = None
    hierarchy: str | None = None
    peak_tflops: float | None = None
    max_memory: int | str | None = None
    #: use the cache where the trace is read (None: unless $TRACEPROF_CACHE is off there)
    cache: bool | None = None
    #: traces loaded at once on this machine, ``max_memory`` being their share of the job's
    sharing: int = 1


class RankResult(msgspec.Struct, frozen=True):
    """One trace's analysis: its profile (module tree with numbers, metadata) and its GPU
    timeline per step. Small: this is what travels from a worker."""

    path: str
    profile: ModuleProfile
    timeline: tuple[StepTimeline, ...]


def analyze_rank(task: tuple[str, RankOptions]) -> RankResult:
    """Load and analyze one trace (run by an engine's worker), through the cache of the machine
    it runs on: a second look at a rank reads its result from there."""
    from traceprof.read import cache as trace_cache
    from traceprof.read.cache import cache_store

    path, options = task
    store = cache_store(options.cache)
    content = trace_cache.content_hash(path) if store is not None else None
    if store is None or content is None:
        return _analyzed_rank(path, options, content)[0]
    return trace_cache.cached(
        store,
        content,
        lambda read: _rank_entry(read, options),
        "rank",
        RankResult,
        lambda: _analyzed_rank(path, options, content),
        lambda hit: _rank_named(hit, path),
        _checked_rank,
    )[0]


def cached_ranks(paths: list[str], options: RankOptions) -> list[RankResult | None]:
    """The result of each path in this machine's cache, or None: a job whose ranks are all
    there starts no worker."""
    from traceprof.read import cache as trace_cache
    from traceprof.read.cache import cache_store

    store = cache_store(options.cache)
    if store is None:
        return [None] * len(paths)
    return [
        _cached_rank(store, path, options, content)
        for path, content in zip(paths, trace_cache.content_hashes(paths))
    ]


def _cached_rank(store: Store, path: str, options: RankOptions, content: str | None) -> RankResult | None:
    if content is None:
        return None
    hit = store.get(_rank_entry(content, options), "rank", RankResult, _checked_rank)
    return _rank_named(hit, path) if hit is not None else None


def _checked_rank(result: RankResult) -> None:
    """A rank's result read from the cache, checked as untrusted input (Store.get)."""
    result.profile.check_links()


def _rank_entry(content: str, options: RankOptions) -> str:
    from traceprof.read import cache as trace_cache

    return trace_cache.entry_name(content, "rank", (options.step, options.hierarchy, options.peak_tflops))


def _analyzed_rank(path: str, options: RankOptions, content: str | None) -> tuple[RankResult, str | None]:
    """The rank's result, and the content hash of the bytes it was computed from (the cache's
    key: :func:`traceprof.read.build.load_keyed`)."""
    from traceprof.analysis.job_timeline import step_timelines
    from traceprof.api import analyze
    from traceprof.read.build import load_keyed

    # one process per trace: the engine's workers are the parallelism (--jobs), so the trace is
    # decoded by this process alone, also with --jobs 1 (in the command's own process)
    try:
        trace, read = load_keyed(
            path, max_memory=options.max_memory, jobs=1, cache=options.cache, content=content
        )
    except MemoryLimitError as e:
        raise shared_limit_error(e, options.sharing) from None
    profile = analyze(trace, step=options.step, hierarchy=options.hierarchy, peak_tflops=options.peak_tflops)
    return RankResult(path, profile, step_timelines(trace)), read


def _rank_named(result: RankResult, path: str) -> RankResult:
    """A cached rank's result with its trace's path as this job spells it."""
    if result.path == path and result.profile.metadata.path == path:
        return result
    return RankResult(path, result.profile.with_path(path), result.timeline)


def rank_results(engine: Any, paths: list[str], options: RankOptions, progress: Any) -> list[RankResult]:
    """Every path's result: from this machine's cache where it is there, the others from the
    engine's workers (none started when every rank is cached)."""
    found: dict[int, RankResult] = {}
    for i, (p, hit) in enumerate(zip(paths, cached_ranks(paths, options))):
        if hit is not None:
            found[i] = hit
            if progress:
                progress(len(found), len(paths), p)
    todo = [i for i in range(len(paths)) if i not in found]
    if todo:

        def counted(done: int, total: int, item: object) -> None:
            progress(len(found) + done, len(paths), item)

        got = engine.map(analyze_rank, [(paths[i], options) for i in todo], counted if progress else None)
        found.update(zip(todo, got))
    return [found[i] for i in range(len(paths))]

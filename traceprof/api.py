"""The Python API: load a trace, analyze it, shape the result."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from traceprof import options
from traceprof.read import cache as trace_cache
from traceprof.read.cache import cache_store
from traceprof.result import transforms
from traceprof.result.model import ModuleProfile
from traceprof.trace.model import is_trace

if TYPE_CHECKING:
    from traceprof.flops import Registry
    from traceprof.progress import Progress
    from traceprof.result.sources import Source
    from traceprof.trace.columns import Trace


def __getattr__(name: str) -> Any:
    # the analysis stages are imported on first use: a look served by the cache never runs them
    if name == "analyze_steps":  # one profile per step, shared work
        from traceprof.analysis.attribution import analyze_steps

        return analyze_steps
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def analyze(
    trace: Trace | str | os.PathLike,
    *,
    step: int | None = None,
    hierarchy: Source | str | None = None,
    depth: int | None = None,
    top: int | None = None,
    sort: transforms.SortKey | str = transforms.SortKey.ORDER,
    ignore: tuple[str, ...] | list[str] = (),
    progress: Progress | None = None,
    formulas: Registry | None = None,
    peak_tflops: float | None = None,
    max_memory: int | str | None = None,
    jobs: int | None = None,
    cache: bool | None = None,
) -> ModuleProfile:
    """Per-module forward/backward GPU and CPU time, FLOPs and bytes of a trace (a
    :class:`Trace` or a path). ``depth``, ``top``, ``sort``, ``ignore``: the modules shaped as
    ``traceprof analyze`` shapes them (:func:`~traceprof.result.transforms.shaped`). ``progress``: called with each stage
    of the work (:data:`traceprof.progress.Progress`). ``formulas``: the FLOP formulas (default:
    ``traceprof.flops.REGISTRY``; ``REGISTRY.only(...)`` narrows it to some op families).
    ``peak_tflops``: the device's peak TFLOP/s for MFU, instead of the peaks table's (MFU on CPUs
    and devices not in the table). ``max_memory``: the memory loading the trace may take (bytes
    or a size such as ``"8G"``; default: ``TRACEPROF_MAX_MEMORY``, else 80% of the available
    memory); past it the load stops with :class:`~traceprof.errors.MemoryLimitError`. ``jobs``:
    processes decoding a large trace (default: one per CPU; the result is the same for any).
    ``cache``: for a path, read the analysis (or else the decoded trace) from the cache, and
    write what was computed there (default: unless ``$TRACEPROF_CACHE`` is ``off``; see
    :mod:`traceprof.read.cache`); the result is the same with or without it.

    >>> profile = analyze("sample_traces/resnet18_train_cpu.pt.trace.json.gz")  # doctest: +SKIP
    >>> profile.to_dataframe()  # doctest: +SKIP
    """
    # checked and made plain int and float once, as the command line does (numpy.int64(2) is 2)
    step = options.argument("step", step, int, min=0)
    depth = options.argument("depth", depth, int, min=0)
    top = options.argument("top", top, int, min=1)
    jobs = options.argument("jobs", jobs, int, min=1)
    peak_tflops = options.argument("peak_tflops", peak_tflops, float, min=0, min_open=True)
    peak_flops = peak_tflops * 1e12 if peak_tflops is not None else None

    def profile_of(trace: Trace) -> ModuleProfile:
        if progress:
            progress("attributing")
        from traceprof.analysis.attribution import analyze as _analyze

        return _analyze(trace, step=step, hierarchy=hierarchy, formulas=formulas, peak_flops=peak_flops)

    def analyzed(path: str | os.PathLike, content: str | None) -> tuple[ModuleProfile, str | None]:
        from traceprof.read.build import load_keyed  # the decoder: a cached look needs none of it

        trace, read = load_keyed(path, progress, max_memory, jobs=jobs, cache=cache, content=content)
        return profile_of(trace), read

    if is_trace(trace):
        profile = profile_of(trace)
    else:
        path = trace
        store = cache_store(cache)
        content = trace_cache.content_hash(path) if store is not None else None
        if store is None or content is None or formulas is not None:
            profile = analyzed(path, content)[0]
        else:
            key_options = (step, str(getattr(hierarchy, "value", hierarchy)), peak_flops)
            profile, _ = trace_cache.cached(
                store,
                content,
                lambda read: trace_cache.entry_name(read, "profile", key_options),
                "profile",
                ModuleProfile,
                lambda: analyzed(path, content),
                lambda hit: hit.with_path(str(path)),
                ModuleProfile.check_links,
            )
    return transforms.shaped(profile, depth=depth, top=top, sort=sort, ignore=ignore)

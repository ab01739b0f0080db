"""The Python API: load a trace, analyze it, shape the result."""

from __future__ import annotations

import os

from traceprof.analysis.attribution import analyze as _analyze
from traceprof.analysis.attribution import analyze_steps  # noqa: F401 - one profile per step, shared work
from traceprof.analysis.hierarchy import Source
from traceprof.flops import Registry
from traceprof.read.build import load_trace
from traceprof.read.load import Progress
from traceprof.result import transforms
from traceprof.result.model import ModuleProfile
from traceprof.trace.model import Trace


def analyze(
    trace: Trace | str | os.PathLike,
    *,
    step: int | None = None,
    hierarchy: Source | str | None = None,
    depth: int | None = None,
    top: int | None = None,
    sort: transforms.SortKey | str = transforms.SortKey.ORDER,
    progress: Progress | None = None,
    formulas: Registry | None = None,
    peak_tflops: float | None = None,
    max_memory: int | str | None = None,
    jobs: int | None = None,
) -> ModuleProfile:
    """Per-module forward/backward GPU and CPU time, FLOPs and bytes of a trace (a
    :class:`Trace` or a path). ``formulas``: the FLOP formulas (default:
    ``traceprof.flops.REGISTRY``; ``REGISTRY.only(...)`` narrows it to some op families).
    ``peak_tflops``: the device's peak TFLOP/s for MFU, instead of the peaks table's (MFU on CPUs
    and devices not in the table). ``max_memory``: the memory loading the trace may take (bytes
    or a size such as ``"8G"``; default: ``TRACEPROF_MAX_MEMORY``, else 80% of the available
    memory); past it the load stops with :class:`~traceprof.errors.MemoryLimitError`. ``jobs``:
    processes decoding a large trace (default: one per CPU; the result is the same for any).

    >>> profile = analyze("sample_traces/resnet18_train_cpu.pt.trace.json.gz")  # doctest: +SKIP
    >>> profile.to_dataframe()  # doctest: +SKIP
    """
    if not isinstance(trace, Trace):
        trace = load_trace(trace, progress, max_memory=max_memory, jobs=jobs)
    if progress:
        progress("attributing")
    profile = _analyze(
        trace,
        step=step,
        hierarchy=hierarchy,
        formulas=formulas,
        peak_flops=peak_tflops * 1e12 if peak_tflops is not None else None,
    )
    if sort != transforms.SortKey.ORDER:
        profile = transforms.sort_children(profile, sort)
    if top is not None:
        profile = transforms.top_children(profile, top, sort)
    if depth is not None:
        profile = transforms.limit_depth(profile, depth)
    return profile

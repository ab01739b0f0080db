"""traceprof: per-nn.Module GPU time, forward and backward, from PyTorch profiler traces.

- **analyze**: `analyze` (a trace, shaped by `depth`, `top`, `sort`, `ignore` as the command
  line shapes it), `load_trace` (parse once, analyze many ways), `analyze_job` (the traces of a
  distributed job), `diff` (two runs); the three take the same keywords for what they read
  (`step`, `hierarchy`, `max_memory`, `cache`) and how they shape the result, and report what
  they are doing to one `Progress` callback, a function of one line of text (`print` is one).
- **capture**: `profile`, `profile_once` (need torch).
- **results**: `ModuleProfile` of `ModuleNode`s, their `Times` per pass (`PhaseTimes`, `Pass`,
  `PASSES`), `NodeKind`, `Source` (the events the module tree was built from),
  `StepSelection`, `Trace`, `Job`, `DiffProfile`.
- **shaping a profile**: `shaped` (all of what `analyze` shapes, in one call), `limit_depth`,
  `sort_children`, `top_children`, `ignore_modules`, `SortKey` (a job and a diff:
  `Job.shaped`, `DiffProfile.shaped`).
- **errors**: `TraceprofError` and `TraceReadError`; and `__version__`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import traceprof.startup  # noqa: F401 - first: Ctrl-C while the command loads is one line
from traceprof.errors import TraceprofError, TraceReadError
from traceprof.version import __version__

if TYPE_CHECKING:  # what the names below are, for type checkers and editors
    from traceprof import render as render  # the subpackage, as an attribute
    from traceprof.api import analyze
    from traceprof.capture import profile, profile_once
    from traceprof.compare.diff import diff
    from traceprof.compare.model import DiffProfile
    from traceprof.job.analyze import analyze_job
    from traceprof.job.model import Job
    from traceprof.progress import Progress
    from traceprof.read.build import load_trace
    from traceprof.result.model import (
        PASSES,
        ModuleNode,
        ModuleProfile,
        NodeKind,
        Pass,
        PhaseTimes,
        StepSelection,
        Times,
    )
    from traceprof.result.sources import Source
    from traceprof.result.transforms import (
        SortKey,
        ignore_modules,
        limit_depth,
        shaped,
        sort_children,
        top_children,
    )
    from traceprof.trace.columns import Trace

#: the public API, imported on first use (module ``__getattr__``): importing traceprof costs
#: nothing beyond its errors and version, so the command line parses its arguments before it
#: imports numpy, and a look served by the cache imports only what it shows
#: (docs/performance.md "Start-up")
_LAZY = {
    "render": "render",  # a subpackage: traceprof.render.render(profile, fmt)
    "Source": "result.sources",
    "analyze": "api",
    "load_trace": "read.build",
    "PASSES": "result.model",
    "ModuleNode": "result.model",
    "ModuleProfile": "result.model",
    "NodeKind": "result.model",
    "Pass": "result.model",
    "PhaseTimes": "result.model",
    "StepSelection": "result.model",
    "Times": "result.model",
    "SortKey": "result.transforms",
    "ignore_modules": "result.transforms",
    "limit_depth": "result.transforms",
    "shaped": "result.transforms",
    "sort_children": "result.transforms",
    "top_children": "result.transforms",
    "Trace": "trace.columns",
    "profile": "capture",
    "profile_once": "capture",
    "Job": "job.model",
    "analyze_job": "job.analyze",
    "DiffProfile": "compare.model",
    "diff": "compare.diff",
    "Progress": "progress",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        value = module if name == "render" else getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "PASSES",
    "DiffProfile",
    "Job",
    "ModuleNode",
    "ModuleProfile",
    "NodeKind",
    "Pass",
    "PhaseTimes",
    "Progress",
    "SortKey",
    "Source",
    "StepSelection",
    "Times",
    "Trace",
    "TraceReadError",
    "TraceprofError",
    "__version__",
    "analyze",
    "analyze_job",
    "diff",
    "ignore_modules",
    "limit_depth",
    "load_trace",
    "profile",
    "profile_once",
    "shaped",
    "sort_children",
    "top_children",
]

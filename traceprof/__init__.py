"""traceprof: per-nn.Module GPU time, forward and backward, from PyTorch profiler traces."""

import traceprof.startup  # noqa: F401 - first: Ctrl-C while the command loads is one line
from traceprof import render  # noqa: F401 - traceprof.render.render(profile, fmt)
from traceprof.analysis.hierarchy import Source
from traceprof.api import analyze
from traceprof.errors import TraceprofError, TraceReadError
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
from traceprof.result.transforms import SortKey, limit_depth, sort_children, top_children
from traceprof.trace.model import Trace
from traceprof.version import __version__

#: names imported on first use: a single-trace analysis never needs the job, diff or capture
#: code (and the capture's imports torch only when a session starts)
_LAZY = {
    "profile": "capture",
    "load_trace": "read.build",
    "profile_once": "capture",
    "Job": "job.analyze",
    "analyze_job": "job.analyze",
    "DiffProfile": "compare.diff",
    "diff": "compare.diff",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
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
    "limit_depth",
    "load_trace",
    "profile",
    "profile_once",
    "sort_children",
    "top_children",
]

"""traceprof: per-nn.Module GPU time, forward and backward, from PyTorch profiler traces."""

from . import render
from .api import analyze
from .capture import profile, profile_once  # torch is imported only when a session starts
from .errors import TraceprofError, TraceReadError
from .hierarchy import Source
from .profile import PASSES, ModuleNode, ModuleProfile, NodeKind, Pass, PhaseTimes, StepSelection, Times
from .trace import Trace, load_trace
from .transforms import SortKey, limit_depth, sort_children, top_children

__version__ = "0.1.0"

#: names imported on first use: a single-trace analysis never needs the job or diff code
_LAZY = {"Job": "job", "analyze_job": "job", "DiffProfile": "diff_profile", "diff": "diff_profile"}


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
    "DiffProfile",
    "diff",
    "Job",
    "ModuleNode",
    "ModuleProfile",
    "NodeKind",
    "PASSES",
    "Pass",
    "PhaseTimes",
    "SortKey",
    "Source",
    "StepSelection",
    "Times",
    "Trace",
    "TraceReadError",
    "TraceprofError",
    "analyze",
    "analyze_job",
    "limit_depth",
    "load_trace",
    "profile",
    "profile_once",
    "sort_children",
    "top_children",
]

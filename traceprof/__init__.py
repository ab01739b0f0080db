"""traceprof: per-nn.Module GPU time, forward and backward, from PyTorch profiler traces."""

from . import render
from .api import analyze
from .capture import profile, profile_once  # torch is imported only when a session starts
from .errors import TraceprofError, TraceReadError
from .hierarchy import Source
from .job import Job, analyze_job
from .diff_profile import DiffProfile, diff
from .profile import PASSES, ModuleNode, ModuleProfile, NodeKind, Pass, PhaseTimes, StepSelection, Times
from .trace import Trace, load_trace
from .transforms import SortKey, limit_depth, sort_children, top_children

__version__ = "0.1.0"

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

"""A step's GPU times (:class:`StepTimeline`): what a job keeps of each rank's steps, made by
:mod:`traceprof.analysis.job_timeline`. A record apart from that stage (and numpy), so that a
job whose ranks come from the cache imports neither."""

from __future__ import annotations

import msgspec


class StepTimeline(msgspec.Struct, frozen=True):
    """One step of one trace, in microseconds. ``step`` is -1 for a trace without steps (the
    whole trace is one window) and for a mean over several steps."""

    step: int
    wall_us: float  # the ProfilerStep slice on the CPU
    window_us: float  # step start to the end of the step or of its last GPU work
    gpu_busy_us: float  # union of all GPU work intervals
    compute_us: float  # union of the GPU work that is not a collective
    collective_us: float  # union of the collective kernels' intervals
    #: collective time during which no other GPU work ran (waiting or moving data, not hidden)
    collective_exposed_us: float
    idle_us: float  # window without GPU work
    kernels: int  # GPU work items (kernels, copies, sets)
    collective_kernels: int

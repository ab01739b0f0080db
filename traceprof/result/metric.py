"""The time a job or a diff compares its modules by: :class:`TimeMetric`, the field of
:class:`~traceprof.result.model.Times` (and of a step's selection) that holds it."""

from __future__ import annotations

import enum


class TimeMetric(str, enum.Enum):
    """GPU busy time on traces with GPU work, else the CPU time of the slices. A member is the
    field name it stands for (``getattr(times, metric)``), and prints as it."""

    GPU_BUSY = "gpu_busy_us"
    CPU = "cpu_us"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of(cls, has_gpu: bool) -> TimeMetric:
        """The metric of a trace (or a set of them) with or without GPU work."""
        return cls.GPU_BUSY if has_gpu else cls.CPU

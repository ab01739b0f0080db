"""Memory a module node allocated and freed, per device and pass: records of a
:class:`~traceprof.result.model.ModuleProfile` (filled by :mod:`traceprof.analysis.memory`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from traceprof.result.model import Pass


class MemoryPhase(msgspec.Struct, frozen=True, gc=False, array_like=True):
    allocated_bytes: float = 0.0  # per step, node and everything below it
    freed_bytes: float = 0.0  # per step
    peak_bytes: int | None = None  # highest allocator total at the node's events; None: unknown
    events: float = 0.0  # [memory] events per step

    @property
    def net_bytes(self) -> float:
        return self.allocated_bytes - self.freed_bytes


class MemoryUse(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """Memory one node allocated and freed on one device, per pass (profile.Pass)."""

    device: str  # "cuda:0", "cpu"
    forward: MemoryPhase
    backward: MemoryPhase
    other: MemoryPhase = MemoryPhase()

    def phase(self, p: Pass | str) -> MemoryPhase:
        """The pass ``p`` (a profile.Pass or its value)."""
        phase: MemoryPhase = getattr(self, getattr(p, "value", p))
        return phase

    @property
    def phases(self) -> tuple[MemoryPhase, MemoryPhase, MemoryPhase]:
        return (self.forward, self.backward, self.other)

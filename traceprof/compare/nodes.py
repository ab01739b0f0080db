"""A diff's nodes: a module node matched across the two traces (:class:`DiffNode`), each of its
passes base -> new (:class:`PassDelta`), and the kernels or ops inside it that changed
(:class:`InsideDelta`). Below the diff itself and its shaping, which both build them."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import msgspec

from traceprof.result.model import PASSES, NodeKind, Pass


class Status(str, enum.Enum):
    MATCHED = "matched"
    ADDED = "added"  # in the new trace only
    REMOVED = "removed"  # in the base trace only


class _Change:
    """Δ, Δ% and the noise mark, from ``base_us``, ``new_us`` and ``spread_us``."""

    __slots__ = ()

    if TYPE_CHECKING:  # given by the subclasses: fields or properties

        @property
        def base_us(self) -> float: ...

        @property
        def new_us(self) -> float: ...

        @property
        def spread_us(self) -> float | None: ...

    @property
    def delta_us(self) -> float:
        return self.new_us - self.base_us

    @property
    def delta_ratio(self) -> float | None:
        """Δ as a fraction of the base time; None when the base time is 0."""
        return self.delta_us / self.base_us if self.base_us > 0 else None

    @property
    def noise(self) -> bool:
        """The change is within the step-to-step spread."""
        return self.spread_us is not None and self.delta_us != 0 and abs(self.delta_us) <= self.spread_us


class PassDelta(_Change, msgspec.Struct, frozen=True):
    """One pass of one node, base -> new. Times per step, microseconds; None: not on that side."""

    phase: Pass
    base_us: float
    new_us: float
    spread_us: float | None  # step-to-step standard deviation (larger side); None: one step
    base_flops: float
    new_flops: float
    base_kernels: float
    new_kernels: float
    base_flop_per_s: float | None
    new_flop_per_s: float | None
    base_memory_peak_bytes: float | None
    new_memory_peak_bytes: float | None
    base_calls: float
    new_calls: float
    #: the node's activations, bytes per step (result.memory.MemoryUse.activation_bytes): in the
    #: forward pass's delta only; None: not known on that side (or another pass)
    base_activation_bytes: float | None = None
    new_activation_bytes: float | None = None


class InsideDelta(msgspec.Struct, frozen=True):
    """A kernel (GPU traces) or op (CPU-only traces) inside a node, base -> new, per step.
    ``status``: added when it ran only in the new trace, removed when only in the base one."""

    kind: str  # "kernel" or "op"
    name: str
    phase: Pass
    base_us: float
    new_us: float
    status: Status

    @property
    def delta_us(self) -> float:
        return self.new_us - self.base_us


class DiffNode(_Change, msgspec.Struct, frozen=True):
    id: int
    parent: int
    children: tuple[int, ...]
    depth: int
    key: str
    name: str
    class_name: str
    qualified_name: str
    kind: NodeKind
    status: Status
    passes: tuple[PassDelta, ...]  # in PASSES order
    inside: tuple[InsideDelta, ...]  # largest |Δ| first, at most match.TOP_INSIDE
    #: step-to-step standard deviation of the node's time over all passes (larger side)
    spread_us: float | None = None
    #: the node's place in the order the modules first ran (base trace first): ``--sort order``
    order: int = 0
    #: on the base / new side, the ancestor whose compiled kernels fused across modules hold
    #: this module's work (its own time there is 0: "fused into transformer.h.0", not -100%);
    #: None when its work is not in such a kernel, or on a side without compiled kernels
    base_fused_into: str | None = None
    new_fused_into: str | None = None

    def phase(self, p: Pass | str) -> PassDelta:
        return self.passes[PASSES.index(Pass(p))]

    @property
    def base_us(self) -> float:
        return sum(p.base_us for p in self.passes)

    @property
    def new_us(self) -> float:
        return sum(p.new_us for p in self.passes)

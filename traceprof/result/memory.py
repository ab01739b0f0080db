"""Memory a module node allocated and freed, per device and pass: records of a
:class:`~traceprof.result.model.ModuleProfile` (filled by :mod:`traceprof.analysis.memory`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from traceprof.result.times import Pass


class MemoryPhase(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """A node's memory in one pass (forward, backward or other) on one device."""

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
    #: bytes allocated in the forward of the node and its subtree that are still allocated when
    #: the backward pass begins, per step (analysis.memory_holders); None: not known (no
    #: addresses to pair allocations with frees, or no backward pass)
    activation_bytes: float | None = None
    own_activation_bytes: float | None = None  # of those, allocated by the node itself

    def phase(self, p: Pass | str) -> MemoryPhase:
        """The pass ``p`` (a profile.Pass or its value)."""
        phase: MemoryPhase = getattr(self, getattr(p, "value", p))
        return phase

    @property
    def phases(self) -> tuple[MemoryPhase, MemoryPhase, MemoryPhase]:
        return (self.forward, self.backward, self.other)


#: the categories of the blocks allocated in the trace (codes: their index); the parameters and
#: the rest allocated before the trace are the allocator's total less these
CATEGORIES = ("activations", "gradients", "optimizer state", "temporaries")
ACTIVATION, GRADIENT, OPTIMIZER_STATE, TEMPORARY = range(len(CATEGORIES))

#: activations listed per moment at most (the largest; the rest summed in ``other_modules_bytes``)
MAX_HOLDERS = 40


class MemoryHolder(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """The bytes one node's allocations hold at a moment."""

    path: tuple[str, ...]  # the node's path (ModuleNode.path): valid after --depth and --top
    qualified_name: str
    bytes: float


class MemoryMoment(msgspec.Struct, frozen=True, gc=False):
    """The allocations alive on the memory device at one moment of a step, by category
    (:mod:`traceprof.analysis.memory_holders`). The categories of the allocator's total add
    up to it: gradients + optimizer state + activations + temporaries + before the trace
    (+ the parameters, when the total counts them)."""

    step: int | None  # the ProfilerStep holding the moment; None: the whole trace
    time_us: float  # from the step's start (the timeline's axis)
    phase: str  # the pass of the memory event at the moment (forward, backward, other)
    module: str | None  # qualified name of the node whose event it is; None: none
    module_path: tuple[str, ...]  # that node's path (ModuleNode.path); (): none
    total_bytes: float | None  # the allocator's total there; None: the trace lacks totals
    #: the module table's parameter bytes (shared tensors once); None: no module table
    parameters_bytes: float | None
    #: whether the allocator's total counts the parameters (CUDA: they were allocated before the
    #: trace and are in its total; the CPU allocator counts from the start of profiling only)
    parameters_in_total: bool
    gradients_bytes: float  # allocated in a backward pass, alive at that pass's end
    optimizer_state_bytes: float  # allocated under the optimizer's step, alive at its step's end
    #: allocated in a forward pass and kept for its backward (in a step without a backward: alive),
    #: by activations_by_module
    activations_bytes: float
    temporaries_bytes: float  # the rest of the allocations made in the trace
    #: alive, allocated before the trace (less the parameters when the total counts them):
    #: optimizer state and buffers of earlier steps, inputs; None: the total is unknown
    before_trace_bytes: float | None
    activations_by_module: tuple[MemoryHolder, ...] = ()  # largest first, MAX_HOLDERS at most
    other_modules_bytes: float = 0.0  # activations of the nodes left out of that list


class MemorySummary(msgspec.Struct, frozen=True, gc=False):
    """What holds the memory device's memory: the lifetimes of its blocks, the forward's
    activations and the moments of the step's peak and of the end of the forward pass."""

    device: str
    #: lifetimes paired from allocations and frees (None: the trace writes no addresses)
    lifetimes: int | None
    allocated_before_trace: int  # blocks freed in the trace whose allocation is before it
    alive_at_trace_end: int  # blocks allocated in the trace and never freed in it
    #: bytes allocated in the forward and alive when the backward begins, per step, all nodes;
    #: None: no lifetimes or no backward pass in the selection
    activation_bytes: float | None
    #: bytes allocated in the backward by modules re-run there (activation checkpointing), per step
    recomputed_bytes: float = 0.0
    recomputed_modules: tuple[str, ...] = ()  # their qualified names, outermost first
    peak: MemoryMoment | None = None  # the selection's highest allocator total
    forward_end: MemoryMoment | None = None  # when the backward begins in the peak's step
    #: why lifetimes, activations or categories are missing (None: all computed)
    note: str | None = None

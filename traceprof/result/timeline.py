"""The timeline of one step, as a profile carries it: lanes, events as columns, the memory curve
(built by :mod:`traceprof.analysis.step_timeline`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from traceprof.result.memory import CATEGORIES
from traceprof.trace.model import check_column

#: events a timeline keeps at most (the rest merged or left out, and counted)
MAX_EVENTS = 40_000
TIMELINE_SCHEMA = "traceprof.timeline/1"


class LaneKind:
    MODULES_FORWARD = "modules_forward"
    MODULES_BACKWARD = "modules_backward"
    CPU = "cpu"
    GPU = "gpu"


class Lane(msgspec.Struct, frozen=True):
    kind: str
    name: str
    rows: int


class MemoryBlocks(msgspec.Struct, frozen=True):
    """The blocks allocated in the trace that are alive during the step on the curve's device,
    one entry per block (columns), so that a viewer stacks the curve by category or by module:
    the curve's total less the blocks alive at a time is what was allocated before the trace
    (the parameters, ...) and the blocks left out."""

    start: np.ndarray  # µs from the step's start, 0 for a block allocated before it
    end: np.ndarray  # µs from the step's start, the step's span for a block alive after it
    nbytes: np.ndarray
    category: np.ndarray  # int8 code: result.memory.CATEGORIES
    module: np.ndarray  # index into Timeline.modules of the node that allocated it, -1: none
    dropped: int = 0  # blocks left out past MAX_MEMORY_BLOCKS (the smallest: bytes x time)


#: blocks a memory curve keeps at most (the rest are in the curve's remainder, and counted)
MAX_MEMORY_BLOCKS = 20_000


class MemoryCurve(msgspec.Struct, frozen=True):
    device: str
    time_us: tuple[float, ...]  # from the step's start
    allocated_bytes: tuple[float, ...]  # the allocator's total after each point's event
    peak_time_us: float
    peak_bytes: float
    peak_module: int  # index into Timeline.modules, -1: none
    peak_phase: str  # the pass of the event at the peak
    exact_total: bool  # False: the trace lacks totals; bytes are relative to the step's start
    blocks: MemoryBlocks | None = None  # None: the trace writes no addresses


class Timeline(msgspec.Struct, frozen=True):
    step: int | None  # the ProfilerStep shown; None: the whole trace
    start_us: float  # trace time of the step's start; event times are relative to it
    span_us: float
    modules: tuple[tuple[str, ...], ...]  # module paths events refer to
    names: tuple[str, ...]
    lanes: tuple[Lane, ...]
    # one entry per event (columns)
    lane: np.ndarray
    row: np.ndarray
    start: np.ndarray  # µs from start_us
    dur: np.ndarray
    name: np.ndarray  # index into names
    module: np.ndarray  # index into modules, -1: none
    phase: np.ndarray  # 0 forward, 1 backward, 2 other
    count: np.ndarray  # events merged into this one (1: a single event)
    events_in_step: int  # before merging and leaving out
    merged_below_us: float
    dropped: int
    memory: MemoryCurve | None = None

    def check(self) -> None:
        """Its columns as the analysis builds them, checked on a timeline read from elsewhere (a
        cache entry, mapped as untrusted input): a ValueError naming the first that is not."""
        n = len(self.lane) if isinstance(self.lane, np.ndarray) else -1
        check_column(self.lane, "timeline.lane", n, "i", (0, len(self.lanes)))
        check_column(self.row, "timeline.row", n, "i", (0, max((ln.rows for ln in self.lanes), default=0)))
        check_column(self.name, "timeline.name", n, "i", (0, len(self.names)))
        check_column(self.module, "timeline.module", n, "i", (-1, len(self.modules)))
        check_column(self.phase, "timeline.phase", n, "i", (0, 3))
        check_column(self.count, "timeline.count", n, "i")
        check_column(self.start, "timeline.start", n, "f")
        check_column(self.dur, "timeline.dur", n, "f")
        if self.memory is not None and not -1 <= self.memory.peak_module < len(self.modules):
            raise ValueError("the memory peak's module is not one of the timeline's")
        blocks = self.memory.blocks if self.memory is not None else None
        if blocks is not None:
            m = len(blocks.start) if isinstance(blocks.start, np.ndarray) else -1
            check_column(blocks.start, "timeline.memory.blocks.start", m, "f")
            check_column(blocks.end, "timeline.memory.blocks.end", m, "f")
            check_column(blocks.nbytes, "timeline.memory.blocks.nbytes", m, "f")
            check_column(blocks.category, "timeline.memory.blocks.category", m, "i", (0, len(CATEGORIES)))
            check_column(blocks.module, "timeline.memory.blocks.module", m, "i", (-1, len(self.modules)))

    def document(self) -> dict[str, Any]:
        """The timeline as JSON-ready columns (the HTML report and TensorBoard tab read it)."""
        # ns precision
        r: Callable[[np.ndarray], list[float]] = lambda a: np.round(a, 3).tolist()  # noqa: E731
        mem = self.memory
        return {
            "schema": TIMELINE_SCHEMA,
            "step": self.step,
            "start_us": self.start_us,
            "span_us": self.span_us,
            "modules": [list(p) for p in self.modules],
            "names": list(self.names),
            "lanes": [{"kind": ln.kind, "name": ln.name, "rows": ln.rows} for ln in self.lanes],
            "events": {
                "lane": self.lane.tolist(),
                "row": self.row.tolist(),
                "start": r(self.start),
                "dur": r(self.dur),
                "name": self.name.tolist(),
                "module": self.module.tolist(),
                "phase": self.phase.tolist(),
                "count": self.count.tolist(),
            },
            "bounds": {
                "events_in_step": self.events_in_step,
                "events_shown": len(self.lane),
                "merged_below_us": self.merged_below_us,
                "dropped": self.dropped,
                "max_events": MAX_EVENTS,
            },
            "memory": None
            if mem is None
            else {
                "device": mem.device,
                "time_us": list(mem.time_us),
                "allocated_bytes": list(mem.allocated_bytes),
                "peak": {
                    "time_us": mem.peak_time_us,
                    "bytes": mem.peak_bytes,
                    "module": mem.peak_module,
                    "phase": mem.peak_phase,
                },
                "exact_total": mem.exact_total,
                "blocks": None
                if mem.blocks is None
                else {
                    "start": r(mem.blocks.start),
                    "end": r(mem.blocks.end),
                    "bytes": mem.blocks.nbytes.tolist(),
                    "category": mem.blocks.category.tolist(),
                    "module": mem.blocks.module.tolist(),
                    "categories": list(CATEGORIES),
                    "dropped": mem.blocks.dropped,
                    "max_blocks": MAX_MEMORY_BLOCKS,
                },
            },
        }

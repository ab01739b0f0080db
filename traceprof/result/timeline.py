"""The timeline of one step, as a profile carries it: lanes, events as columns, the memory curve
(built by :mod:`traceprof.analysis.step_timeline`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from traceprof.result.memory import CATEGORIES

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

    start: tuple[float, ...]  # µs from the step's start, 0 for a block allocated before it (to the ns)
    end: tuple[float, ...]  # µs from the step's start, the step's span for a block alive after it
    nbytes: tuple[float, ...]
    category: tuple[int, ...]  # code: result.memory.CATEGORIES
    module: tuple[int, ...]  # index into Timeline.modules of the node that allocated it, -1: none
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
    # one entry per event (columns: tuples, not arrays, so that a profile read from the cache
    # needs no numpy; at most MAX_EVENTS of them)
    lane: tuple[int, ...]
    row: tuple[int, ...]
    start: tuple[float, ...]  # µs from start_us, to the ns
    dur: tuple[float, ...]  # µs, to the ns
    name: tuple[int, ...]  # index into names
    module: tuple[int, ...]  # index into modules, -1: none
    phase: tuple[int, ...]  # 0 forward, 1 backward, 2 other
    count: tuple[int, ...]  # events merged into this one (1: a single event)
    events_in_step: int  # before merging and leaving out
    merged_below_us: float
    dropped: int
    memory: MemoryCurve | None = None

    def check(self) -> None:
        """Its columns as the analysis builds them, checked on a timeline read from elsewhere (a
        cache entry, read as untrusted input; the decoder has checked their types): a ValueError
        naming the first that is not."""
        n = len(self.lane)
        _check(self.lane, "timeline.lane", n, (0, len(self.lanes)))
        _check(self.row, "timeline.row", n, (0, max((ln.rows for ln in self.lanes), default=0)))
        _check(self.name, "timeline.name", n, (0, len(self.names)))
        _check(self.module, "timeline.module", n, (-1, len(self.modules)))
        _check(self.phase, "timeline.phase", n, (0, 3))
        _check(self.count, "timeline.count", n)
        _check(self.start, "timeline.start", n)
        _check(self.dur, "timeline.dur", n)
        if self.memory is not None and not -1 <= self.memory.peak_module < len(self.modules):
            raise ValueError("the memory peak's module is not one of the timeline's")
        blocks = self.memory.blocks if self.memory is not None else None
        if blocks is not None:
            m = len(blocks.start)
            _check(blocks.start, "timeline.memory.blocks.start", m)
            _check(blocks.end, "timeline.memory.blocks.end", m)
            _check(blocks.nbytes, "timeline.memory.blocks.nbytes", m)
            _check(blocks.category, "timeline.memory.blocks.category", m, (0, len(CATEGORIES)))
            _check(blocks.module, "timeline.memory.blocks.module", m, (-1, len(self.modules)))

    def document(self) -> dict[str, Any]:
        """The timeline as JSON-ready columns (the HTML report and TensorBoard tab read it)."""
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
                "lane": list(self.lane),
                "row": list(self.row),
                "start": list(self.start),
                "dur": list(self.dur),
                "name": list(self.name),
                "module": list(self.module),
                "phase": list(self.phase),
                "count": list(self.count),
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
                    "start": list(mem.blocks.start),
                    "end": list(mem.blocks.end),
                    "bytes": list(mem.blocks.nbytes),
                    "category": list(mem.blocks.category),
                    "module": list(mem.blocks.module),
                    "categories": list(CATEGORIES),
                    "dropped": mem.blocks.dropped,
                    "max_blocks": MAX_MEMORY_BLOCKS,
                },
            },
        }


def _check(values: Sequence[float], name: str, length: int, within: tuple[int, int] | None = None) -> None:
    """A column of ``length`` values, each in ``within`` (lowest, end) when given; a ValueError
    naming it otherwise."""
    if len(values) != length:
        raise ValueError(f"column {name} has {len(values)} values, not {length}")
    if within is not None and values and (min(values) < within[0] or max(values) >= within[1]):
        raise ValueError(f"column {name} holds values outside {within[0]}..{within[1] - 1}")

"""A trace's events as columnar arrays (:class:`EventTable` and the tables beside it), the
:class:`Trace` that holds them with its metadata (:mod:`traceprof.trace.model`), and the helpers
of such columns.

Built once from the reader's raw events; after that no per-event Python object is kept. Strings
(names, categories, shapes) are stored once in a table and referenced by int32 codes. The
metadata's records live apart, in :mod:`traceprof.trace.model`, because a look served by the
cache reads them without importing numpy.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from traceprof.trace.model import ThreadInfo, TraceMetadata
from traceprof.trace.schema import Kind


class EventTable(msgspec.Struct, frozen=True):
    """One row per trace event. Absent integers are -1; absent string codes are -1."""

    kind: np.ndarray  # int8, schema.Kind
    name: np.ndarray  # int32 -> names
    category: np.ndarray  # int32 -> categories
    thread: np.ndarray  # int32 -> threads
    ts: np.ndarray  # float64, microseconds as written in the trace
    dur: np.ndarray  # float64, microseconds (0 for instants)
    # ids: the narrowest integer type that holds the column (see narrowed)
    correlation: np.ndarray
    external_id: np.ndarray
    sequence_number: np.ndarray
    fwd_thread_id: np.ndarray
    stream: np.ndarray
    flow_id: np.ndarray  # flow events
    input_dims: np.ndarray  # int32 -> texts (raw JSON)
    input_types: np.ndarray  # int32 -> texts
    concrete_inputs: np.ndarray  # int32 -> texts
    names: tuple[str, ...]
    categories: tuple[str, ...]
    threads: tuple[ThreadInfo, ...]
    texts: tuple[bytes, ...]

    def __len__(self) -> int:
        return len(self.kind)

    @property
    def end(self) -> np.ndarray:
        end: np.ndarray = self.ts + self.dur
        return end

    def count(self, kind: Kind) -> int:
        return int(np.count_nonzero(self.kind == kind))

    def named(self, test: Callable[[str], object]) -> np.ndarray:
        """Whether each event's name passes ``test``: one call per distinct name, then a lookup
        of the name codes (no Python work per event)."""
        by_code = np.fromiter((bool(test(n)) for n in self.names), bool, len(self.names))
        out: np.ndarray = by_code[self.name] if len(self.names) else np.zeros(len(self.name), bool)
        return out


class MemoryEvents(msgspec.Struct, frozen=True):
    """The ``[memory]`` instants of a trace (``profile_memory=True``), one row each."""

    # integers: the narrowest type that holds the column (see narrowed)
    event: np.ndarray  # index into the EventTable
    bytes: np.ndarray  # > 0 allocated, < 0 freed
    total_allocated: np.ndarray  # allocator total after the event, -1 when not written
    device: np.ndarray  # int32 -> devices
    devices: tuple[str, ...]  # "cuda:0", "cpu"
    #: the block's address ("Addr"), -1 when not written (traces before 2022): an allocation and
    #: the free of its block share it (analysis.lifetimes)
    address: np.ndarray

    def __len__(self) -> int:
        return len(self.event)


class PythonFrames(msgspec.Struct, frozen=True):
    """The ids of the python_function events, one row each (only they carry them: a column of
    every event would be -1 almost everywhere). Integers narrowed (see narrowed)."""

    event: np.ndarray  # index into the EventTable
    id: np.ndarray  # "Python id"
    parent_id: np.ndarray  # "Python parent id", -1 when not written

    def __len__(self) -> int:
        return len(self.event)


class KernelLabels(msgspec.Struct, frozen=True):
    """The labels PyTorch's own tools write on GPU work events (``schema.KERNEL_LABEL_ARGS``:
    a module's qualified name, Inductor's cudagraph label, an annotation, a source stack), one
    row per event that has any (only they carry them; most traces have none). Each label is a
    code into ``EventTable.texts`` (its raw JSON), -1 where the event has not that one."""

    event: np.ndarray  # index into the EventTable (narrowed)
    module_fqn: np.ndarray  # int32 -> EventTable.texts: "module_fqn"
    text: np.ndarray  # "str"
    annotation: np.ndarray  # "annotation"
    stack: np.ndarray  # "stack"

    def __len__(self) -> int:
        return len(self.event)


class Trace(msgspec.Struct, frozen=True):
    metadata: TraceMetadata
    events: EventTable
    python: PythonFrames
    memory: MemoryEvents | None = None
    #: kernel labels; None when no GPU work event has one
    labels: KernelLabels | None = None

    def __repr__(self) -> str:  # without the python frames and memory events
        return f"Trace(metadata={self.metadata!r}, events={self.events!r})"

    def with_path(self, path: str) -> Trace:
        """This trace with its path spelled ``path`` (a decoded trace read from the cache for a
        file of the same content under another name)."""
        if self.metadata.path == path:
            return self
        return msgspec.structs.replace(self, metadata=msgspec.structs.replace(self.metadata, path=path))

    @property
    def python_ids(self) -> np.ndarray:
        """ "Python id" of every event, -1 where it has none (built when asked)."""
        return self._per_event(self.python.id)

    @property
    def python_parent_ids(self) -> np.ndarray:
        """ "Python parent id" of every event, -1 where it has none (built when asked)."""
        return self._per_event(self.python.parent_id)

    def _per_event(self, values: np.ndarray) -> np.ndarray:
        out = np.full(len(self.events), -1, values.dtype)
        out[self.python.event] = values
        return out


def release_freed_memory() -> None:
    """Give the memory freed so far back to the system. The decode frees millions of small
    objects whose space glibc's allocator keeps in fragments (more than a third of the process
    after a load); ``malloc_trim`` returns it. A no-op where the C library is not glibc."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not Linux, or not glibc (musl has no malloc_trim)
        return None


_INT32 = np.iinfo(np.int32)
#: the integer types a column may be stored in, narrowest first
_NARROW_TYPES = (np.int8, np.int16, np.int32)


def narrowed(values: np.ndarray) -> np.ndarray:
    """Integers in the narrowest of int8, int16 and int32 that holds every value, else int64.
    The ids, counters and indices of every trace seen fit int32 (many int8: thread indices,
    streams), which halves or more their memory; a trace with a larger value keeps int64 for
    that column. The dtype depends on the values only, so a trace decoded whole or run by run
    gets the same one. Code reading such a column must widen it before arithmetic (numpy keeps
    the narrow type) and must not write values of another column into it."""
    values = np.asarray(values)
    lo, hi = (int(values.min()), int(values.max())) if len(values) else (0, 0)
    for dtype in _NARROW_TYPES:
        info = np.iinfo(dtype)
        if info.min <= lo and hi <= info.max:
            return values.astype(dtype, copy=False)
    return values.astype(np.int64, copy=False)


def check_column(
    values: Any, name: str, length: int, kind: str, within: tuple[int, int] | None = None
) -> None:
    """Check a column of a table read from elsewhere (a cache entry) as the code that built it
    would have made it: a one-dimensional array of ``length`` values of ``kind`` (numpy's
    ``dtype.kind``: "i" integers, "f" floats, "b" bools), each in ``within`` (lowest, end) when
    given; a ValueError naming the column otherwise."""
    if not isinstance(values, np.ndarray) or values.ndim != 1 or values.dtype.kind != kind:
        raise ValueError(f"column {name} is not a vector of the type it is built in")
    if len(values) != length:
        raise ValueError(f"column {name} has {len(values)} values, not {length}")
    if (
        within is not None
        and len(values)
        and (int(values.min()) < within[0] or int(values.max()) >= within[1])
    ):
        raise ValueError(f"column {name} holds values outside {within[0]}..{within[1] - 1}")


def index_dtype(n_events: int) -> type[np.signedinteger]:
    """The integer type of arrays of event indices (with -1 for none) over ``n_events``
    events: int32 below 2**31 events, which halves every per-event link array."""
    return np.int32 if n_events < _INT32.max else np.int64


def unique(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of an integer array, as ``np.unique(values)``. Sorting is
    several times faster than np.unique's hashing on event columns, and np.unique imports
    numpy.ma on its first call (10 ms of every command)."""
    ordered = np.sort(values, axis=None)
    first = np.empty(len(ordered), bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return ordered[first]


#: events a stage processes at a time where it would otherwise build temporaries of every
#: event: a few MB each, whatever the trace
BLOCK_EVENTS = 1 << 18

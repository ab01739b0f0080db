"""Trace: the events of one trace file as columnar arrays, plus its metadata.

Built once from the reader's raw events; after that no per-event Python object is kept. Strings
(names, categories, shapes) are stored once in a table and referenced by int32 codes.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from traceprof.trace.schema import COMPILED_TABLE_FORMAT, Kind


class ThreadInfo(msgspec.Struct, frozen=True):
    pid: str
    tid: str
    name: str
    is_gpu: bool


class DeviceInfo(msgspec.Struct, frozen=True):
    index: int
    name: str
    memory_bytes: int | None = None
    sm_count: int | None = None
    compute_capability: str | None = None


class ModuleInfo(msgspec.Struct, frozen=True, gc=False):
    """One row of the module table that traceprof.capture embeds (docs/trace-conventions.md)."""

    name: str
    class_name: str
    params: int | None = None
    params_total: int | None = None
    trainable_total: int | None = None
    frozen_total: int | None = None
    buffers_total: int | None = None
    extra_repr: str = ""
    inputs: Any = None
    outputs: Any = None
    # added to the table later; None in traces captured before
    param_bytes: int | None = None  # own parameters, bytes
    param_bytes_total: int | None = None  # with children, shared tensors once
    param_counts: dict[str, int] | None = None  # own parameters by name -> numel
    leaf: bool | None = None  # no child modules
    weight_shape: tuple[int, ...] | None = None  # shape of a ``weight`` parameter
    kernel_size: Any = None  # a ``kernel_size`` attribute (int or list), as torchinfo shows it
    #: own parameters that are an earlier module's (tied weights): name -> that one's qualified name
    tied: dict[str, str] | None = None


class ModuleTable(msgspec.Struct, frozen=True):
    version: int
    modules: dict[str, ModuleInfo]
    torch_version: str | None = None
    rank: int | None = None
    world_size: int | None = None


# The module table (docs/trace-conventions.md "Module table"): traceprof.capture builds these
# records and encodes them (msgspec.to_builtins), the reader decodes the same records, each key
# spelled here once. Only the skeleton is typed (an object with a list of rows, each with a name
# and a class): a value of another type than the capture writes reads as unknown and never makes
# the table unreadable, so the values are ``Any`` here and the reader (``read/build.py``) makes
# each a ``ModuleInfo`` field. A row's field left None (UNSET: inputs and outputs) is not written.


class RawModuleRow(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """One row of the module table as written: the keys of ``ModuleInfo``, the class as ``class``."""

    name: Any
    class_name: Any = msgspec.field(name="class")
    params: Any = None
    params_total: Any = None
    trainable_total: Any = None
    frozen_total: Any = None
    buffers_total: Any = None
    extra_repr: Any = None
    param_bytes: Any = None
    param_bytes_total: Any = None
    param_counts: Any = None
    leaf: Any = None
    tied: Any = None
    weight_shape: Any = None
    kernel_size: Any = None
    #: the first call's arguments and returned value described; UNSET: the module was never called
    inputs: Any = UNSET
    outputs: Any = UNSET


class RawModuleTable(msgspec.Struct, frozen=True, kw_only=True):
    """The module table's document as written (``schema.MODULE_TABLE_FORMAT``)."""

    format: str
    version: Any = 1
    torch_version: Any = None
    rank: Any = None
    world_size: Any = None
    modules: list[RawModuleRow]


# The compiled-kernel table (docs/trace-conventions.md): traceprof.capture builds these records
# and encodes them (msgspec.to_builtins); the reader decodes the same records. A field whose
# default is UNSET is a key the capture writes only where it applies: UNSET when absent.


class CompiledNode(msgspec.Struct, frozen=True):
    """One post-grad FX node of a compiled graph (the compiled-kernel table, docs/attribution.md
    "Compiled models"): the aten op it runs, its arguments described, and its module."""

    op: str  # "aten.mm.default" (an OpOverload), or a Python callable's name ("getitem")
    #: per positional argument: a tensor ``{"shape": [...], "dtype": "float32"}`` (a symbolic
    #: size is its expression, "s77"), a list of them, a number, a bool, a list, None, a
    #: symbolic scalar ``{"sym": "s77"}``, or text
    inputs: tuple[Any, ...] = ()
    kwargs: dict[str, Any] | UnsetType = UNSET  # keyword arguments, described as ``inputs``
    output: Any = None
    #: qualified name of the innermost module of its module stack, relative to the compiled root
    #: ("" = the root itself)
    module: str = ""
    module_class: str | None = None
    #: the compiled frame's local that ``module`` is relative to (``"L['self']"``); only on a
    #: node with a module (None: its inputs' modules had different roots)
    root_local: str | UnsetType | None = UNSET
    #: where ``module`` came from; None: the node has no module stack (code of the compiled
    #: function itself, autograd's gradient sums): it belongs to the root
    module_from: str | None = None
    #: the op this node is part of the decomposition of ("aten.gelu.default"); UNSET: not decomposed
    original_aten: str | UnsetType | None = UNSET
    #: the call of that op the node comes from: the nodes of one group are costed as the op, once
    original_group: str | UnsetType | None = UNSET
    #: that op's arguments, described as ``inputs`` (on one node of the group: its first output's)
    original_inputs: tuple[Any, ...] | UnsetType | None = UNSET


class CompiledCall(msgspec.Struct, frozen=True):
    """One call site of a compiled graph's wrapper, in call order: a generated kernel
    (``cpp``, ``triton``), an extern kernel or a fallback (an ordinary aten op event)."""

    kernel: str  # the wrapper's callee
    kind: str  # "cpp", "triton", "extern", "fallback", "wrapper"
    event: str | None  # the name of the event the call leaves in a trace; None: not known
    #: the provenance debug handle of the call in the wrapper's source (None: it has none)
    handle: int | None = None
    index: int | None = None  # its position in the wrapper's calls
    nodes: tuple[str, ...] = ()  # the post-grad nodes it computes (keys of the graph's nodes)
    #: the module it works for, relative to the compiled root: the deepest module common to its
    #: nodes with a module stack (an extern call: the module of the node it computes); None:
    #: nothing known
    module: str | None = None
    module_from: str | None = None
    modules: dict[str, int] | UnsetType = UNSET  # its nodes' modules, each with its node count
    #: an extern call's node (the others are views feeding it)
    primary_node: str | UnsetType | None = UNSET


class CompiledInput(msgspec.Struct, frozen=True):
    """A placeholder of a compiled graph: its name and its value described (symbolic sizes
    stay symbolic; a run's concrete inputs bind them)."""

    name: str
    val: Any = None


class CompiledGraph(msgspec.Struct, frozen=True):
    """One graph Inductor compiled: forward, backward or inference."""

    table_key: str  # its key in the table (the FX graph cache key, or "nokey:<id>:<direction>")
    key: str | None  # the FX graph cache key its runs' scopes name; None: the cache was bypassed
    direction: str  # "forward", "backward" or "inference"
    graph_id: int | None = None
    event_prefixes: tuple[str, ...] = ()  # "graph_<id>_" of its generated kernels' events
    compile_ids: tuple[str, ...] = ()  # Dynamo compile ids ("0/0") it was compiled or loaded for
    wrapper: str | None = None  # its wrapper's language: "python", "cpp" or "none"
    #: where its nodes came from: "post_grad_pass" (its compile), "none" (a cache hit without them)
    nodes_source: str | None = None
    inputs: tuple[CompiledInput, ...] = ()
    calls: tuple[CompiledCall, ...] = ()
    nodes: dict[str, CompiledNode] = {}
    #: relative module path -> its output's value described (forward and inference graphs)
    module_outputs: dict[str, Any] = {}
    earlier_session: bool | UnsetType = UNSET  # True: recorded by an earlier recorder


class CompiledCompile(msgspec.Struct, frozen=True):
    """One compile (or cache load) of a graph, in order."""

    key: str  # table key of the graph
    direction: str = ""
    compile_id: str | None = None
    graph_id: int | None = None
    cache: str | None = None  # "compiled" or "cache_hit"
    root: str | None = None  # qualified name of the module Dynamo compiled (None: not known)
    root_class: str | None = None  # that module's class
    #: where its graph's row came from: "compile", "session", "process", "cache_dir" (None: nowhere)
    table_from: str | None = None
    earlier_session: bool | UnsetType = UNSET  # True: recorded by an earlier recorder


class CompiledOmission(msgspec.Struct, frozen=True):
    """Something the capture could not write into the table, and why."""

    graph: str | None = None  # the graph's table key (None: the whole table)
    node: str | None = None  # the node left out of it (None: the whole graph)
    reason: str = ""


class CompiledTable(msgspec.Struct, frozen=True):
    """The compiled-kernel table that traceprof.capture embeds for ``torch.compile`` graphs:
    for every call site of every compiled graph, the event it leaves and the nodes (and so the
    modules) it computes."""

    version: int
    graphs: dict[str, CompiledGraph]
    compiles: tuple[CompiledCompile, ...] = ()
    torch_version: str | None = None
    warnings: tuple[str, ...] = ()
    #: what the capture left out (a value it could not write), each with its reason
    omitted: tuple[CompiledOmission, ...] = ()
    format: str = COMPILED_TABLE_FORMAT
    #: what went into the recorder's pass's uuid (and so into every FX graph cache key)
    salt: str | UnsetType = UNSET
    config: dict[str, Any] | UnsetType = UNSET  # the Inductor settings the graphs were compiled with


class TraceMetadata(msgspec.Struct, frozen=True):
    path: str
    size_bytes: int
    schema_version: int | None
    devices: tuple[DeviceInfo, ...]
    rank: int | None
    world_size: int | None
    distributed_backend: str | None
    base_time_ns: int | None
    flags: dict[str, bool]
    module_table: ModuleTable | None
    warnings: tuple[str, ...]
    #: the compiled-kernel table (traces of torch.compile'd models captured by traceprof)
    compiled_table: CompiledTable | None = None


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


# ---------------------------------------------------------------------------------------------
# Times that cannot be right. Nothing is changed silently: every event dropped or repaired is
# counted in a warning.

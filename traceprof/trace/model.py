"""What a trace says of itself: its metadata (:class:`TraceMetadata`: devices, threads, rank,
the module table and the compiled-kernel table traceprof embeds), as plain records. The events
themselves are columns, in :mod:`traceprof.trace.columns`.

No numpy here: a profile read from the cache holds these records, and such a look imports
nothing it does not need.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import UNSET, UnsetType

from traceprof.trace.schema import COMPILED_TABLE_FORMAT

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    from traceprof.trace.columns import Trace


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


def is_trace(value: object) -> TypeIs[Trace]:
    """Whether ``value`` is a :class:`~traceprof.trace.columns.Trace`, without importing that
    module (and numpy): a look served by the cache needs neither, and no Trace exists before
    the module is imported."""
    columns = sys.modules.get("traceprof.trace.columns")
    return columns is not None and isinstance(value, columns.Trace)

"""The only module that knows how Kineto and Chrome traces spell things.

Every raw spelling (argument names such as ``"Input Dims"``, category names of every era, event
name patterns such as ``ProfilerStep#N`` or ``nn.Module: X_N``) lives here and is mapped to a
canonical name. Later stages see only :class:`Kind` codes and the canonical field names.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, Any, Optional, Union

import msgspec


class Kind(enum.IntEnum):
    """Canonical event kind, stored as one int8 per event."""

    OTHER = 0
    CPU_OP = 1  # an operator on a CPU thread (aten::mm, autograd nodes, ...)
    ANNOTATION = 2  # a user scope on a CPU thread (record_function, ProfilerStep#N)
    PYTHON = 3  # a Python function (with_stack=True)
    RUNTIME = 4  # a CUDA/HIP runtime or driver call on a CPU thread (kernel launches)
    KERNEL = 5  # a kernel on a GPU stream
    MEMCPY = 6  # a memory copy on a GPU stream
    MEMSET = 7  # a memory set on a GPU stream
    GPU_ANNOTATION = 8  # a user scope mirrored onto a GPU stream
    INSTANT = 9  # an instant event ([memory] and others)
    FLOW_START = 10
    FLOW_END = 11
    TRACE_SPAN = 12  # the profiler's own "Trace" span


#: kinds of slices on CPU threads that nest by time
CPU_SLICE_KINDS = (Kind.CPU_OP, Kind.ANNOTATION, Kind.PYTHON, Kind.RUNTIME)
#: kinds of work done by a GPU
GPU_WORK_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)

# Category spellings of every era: 2021 capitalised names, 2022+ snake case.
_CATEGORY_KINDS: dict[str, Kind] = {
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "user_annotation": Kind.ANNOTATION,
    "python_function": Kind.PYTHON,
    "cuda_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "hip_runtime": Kind.RUNTIME,
    "hip_driver": Kind.RUNTIME,
    "privateuse1_runtime": Kind.RUNTIME,
    "privateuse1_driver": Kind.RUNTIME,
    "kernel": Kind.KERNEL,
    "cuda_profiler_range": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
    "trace": Kind.TRACE_SPAN,
}


def kind_of(ph: str, cat: str) -> Kind:
    """The canonical kind of an event from its phase and category."""
    if ph == "X":
        return _CATEGORY_KINDS.get(cat.lower(), Kind.OTHER)
    if ph == "i" or ph == "I":
        return Kind.INSTANT
    if ph == "s":
        return Kind.FLOW_START
    if ph == "f" or ph == "t":
        return Kind.FLOW_END
    return Kind.OTHER


# ---------------------------------------------------------------------------------------------
# Raw event layout. One table of (canonical attribute, raw spelling, type) drives the typed
# decoder and the lenient path used when a trace has unusual value types.

# Integer arguments decode as int with -1 for "absent" so that columns build without None checks;
# a trace with null or non-integer values there takes the lenient path (read/events.py, lenient_entries).
# Integers must fit the int64 columns they end up in; larger ones also take the lenient path,
# which treats them as absent.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_I64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
_INT = _I64
_ARG_FIELDS: tuple[tuple[str, str, Any], ...] = (
    ("correlation", "correlation", _INT),
    ("external_id", "External id", _INT),
    ("external_id_2021", "external id", _INT),
    ("sequence_number", "Sequence number", _INT),
    ("fwd_thread_id", "Fwd thread id", _INT),
    ("python_id", "Python id", Optional[_I64]),
    ("python_parent_id", "Python parent id", Optional[_I64]),
    ("stream", "stream", _INT),
    ("device", "device", _INT),
    ("input_dims", "Input Dims", msgspec.Raw),
    ("input_types", "Input type", msgspec.Raw),
    ("concrete_inputs", "Concrete Inputs", msgspec.Raw),
    ("label", "name", Optional[str]),  # thread_name / process_name metadata
    ("labels", "labels", Optional[str]),  # process_labels metadata ("GPU 0", "CPU")
    ("sort_index", "sort_index", _INT),
    # [memory] instant events (profile_memory=True); "Bytes" is negative for a free, so its
    # absence is None rather than -1
    ("mem_bytes", "Bytes", Optional[_I64]),
    ("total_allocated", "Total Allocated", _INT),
    ("mem_address", "Addr", _INT),  # the block's address: pairs an allocation with its free
    ("device_type", "Device Type", _INT),
    ("device_id", "Device Id", _INT),
    # labels that PyTorch's own tools write on GPU work events (KERNEL_LABEL_ARGS below), as
    # raw JSON: a string, a list of stack texts, a JSON text of annotations
    ("label_module_fqn", "module_fqn", msgspec.Raw),
    ("label_str", "str", msgspec.Raw),
    ("label_annotation", "annotation", msgspec.Raw),
    ("label_stack", "stack", msgspec.Raw),
)

_EVENT_FIELDS: tuple[tuple[str, str, Any, Any], ...] = (
    ("ph", "ph", str, ""),
    ("cat", "cat", str, ""),
    ("name", "name", str, ""),
    ("pid", "pid", Union[int, str], 0),
    ("tid", "tid", Union[int, str], 0),
    ("ts", "ts", float, float("nan")),
    ("dur", "dur", float, float("nan")),  # absent: NaN, reported on complete events
    ("id", "id", Union[_I64, str, None], None),
)


def _make_structs() -> tuple[type, type]:
    arg_fields = []
    for attr, raw, typ in _ARG_FIELDS:
        default = -1 if typ is _INT else None
        arg_fields.append((attr, typ, msgspec.field(default=default, name=raw)))
    args_t = msgspec.defstruct("RawArgs", arg_fields, gc=False)
    ev_fields = []
    for attr, raw, typ, default in _EVENT_FIELDS:
        ev_fields.append((attr, typ, msgspec.field(default=default, name=raw)))
    # every event gets an args struct (an empty one when it has none) so columns need no checks
    ev_fields.append(("args", args_t, msgspec.field(default_factory=args_t)))
    event_t = msgspec.defstruct("RawEvent", ev_fields, gc=False)
    return args_t, event_t


#: typed structs the reader decodes events into (unknown fields are skipped while parsing)
RawArgs, RawEvent = _make_structs()
#: canonical argument attribute -> raw spelling, for the reader's lenient path
ARG_SPELLINGS: dict[str, str] = {attr: raw for attr, raw, _ in _ARG_FIELDS}
#: arguments whose absence is None (not -1)
OPTIONAL_INT_ARGS = frozenset(attr for attr, _, typ in _ARG_FIELDS if typ == Optional[_I64])
#: the event fields and argument names traceprof reads (every other one is skipped unread)
EVENT_FIELD_SPELLINGS = frozenset(raw for _, raw, _, _ in _EVENT_FIELDS)
ARGS_KEY = "args"
ARG_NAMES_READ = frozenset(ARG_SPELLINGS.values())
#: phases of the events a trace needs at least one of (with a timestamp) to be analyzed:
#: complete slices (B/E pairs become X), instants and flows
USABLE_PHASES = ("X", "i", "I", "s", "f", "t")
METADATA_PHASE = "M"

# ---------------------------------------------------------------------------------------------
# Memory events (profile_memory=True): instants named "[memory]" on the allocating thread.

MEMORY_EVENT_NAME = "[memory]"
#: c10::DeviceType codes written as "Device Type" -> device names
DEVICE_TYPE_NAMES: dict[int, str] = {
    0: "cpu",
    1: "cuda",
    2: "mkldnn",
    6: "hip",
    8: "maia",
    9: "xla",
    12: "xpu",
    13: "mps",
    14: "meta",
    15: "hpu",
    16: "ve",
    18: "ipu",
    19: "mtia",
    20: "privateuseone",
}

# ---------------------------------------------------------------------------------------------
# Top-level keys.

TRACE_EVENTS_KEY = "traceEvents"
DEVICE_PROPERTIES_KEY = "deviceProperties"
DISTRIBUTED_INFO_KEY = "distributedInfo"
BASE_TIME_NS_KEY = "baseTimeNanoseconds"
SCHEMA_VERSION_KEY = "schemaVersion"
MODULE_TABLE_KEY = "traceprof"  # written by traceprof.capture (docs/trace-conventions.md)
#: the key of an embedded table's format (the module table's and the compiled-kernel table's)
TABLE_FORMAT_KEY = "format"
#: the module table's format and version, as the capture writes them (the reader checks the format)
MODULE_TABLE_FORMAT = "traceprof.modules"
MODULE_TABLE_VERSION = 1
#: the compiled-kernel table traceprof.capture writes for torch.compile graphs (same document)
COMPILED_TABLE_KEY = "traceprof_compiled"
#: boolean capture flags written at the top level by newer PyTorch versions
FLAG_KEYS = ("record_shapes", "with_flops", "with_modules", "profile_memory", "with_stack")
#: the top-level values traceprof reads; the others (user metadata, ...) are kept undecoded
TOP_LEVEL_KEYS_READ = frozenset(
    {
        DEVICE_PROPERTIES_KEY,
        DISTRIBUTED_INFO_KEY,
        BASE_TIME_NS_KEY,
        SCHEMA_VERSION_KEY,
        MODULE_TABLE_KEY,
        COMPILED_TABLE_KEY,
        *FLAG_KEYS,
    }
)

# deviceProperties entry spellings
DEVICE_NAME = "name"
DEVICE_MEMORY = "totalGlobalMem"
DEVICE_SMS = "numSms"
DEVICE_CC_MAJOR = "computeMajor"
DEVICE_CC_MINOR = "computeMinor"
# distributedInfo spellings
DIST_RANK = "rank"
DIST_WORLD_SIZE = "world_size"
DIST_BACKEND = "backend"

# Metadata (ph "M") event names
META_THREAD_NAME = "thread_name"
META_PROCESS_LABELS = "process_labels"

# ---------------------------------------------------------------------------------------------
# Event name patterns.

#: (at most 18 digits, so that the number fits an int64)
STEP_RE = re.compile(r"ProfilerStep#(\d{1,18})\Z")
#: traceprof's own module scope, version 1 (docs/trace-conventions.md)
TRACEPROF_SCOPE_RE = re.compile(r"\[traceprof:(\d+)\]([^:]*):[ ]?(.*)\Z", re.S)
TRACEPROF_SCOPE_VERSION = 1


def traceprof_scope_name(class_name: str, qualified_name: str) -> str:
    """The name traceprof.capture gives a module call's scope (the root has the empty name)."""
    return f"[traceprof:{TRACEPROF_SCOPE_VERSION}]{class_name}: {qualified_name}"


#: PyTorch Lightning's module scope; the class may be dotted (module path + class)
LIGHTNING_SCOPE_RE = re.compile(r"\[pl\]\[module\]([^:]*):[ ]?(.*)\Z", re.S)
#: python_function module event of with_stack=True traces
NN_MODULE_RE = re.compile(r"nn\.Module: (.+)_(\d+)\Z", re.S)
#: the autograd engine's wrapper around each backward node
BACKWARD_WRAPPER_PREFIX = "autograd::engine::evaluate_function: "
#: a backward node's own name ("MmBackward0", 2021: "AddmmBackward")
BACKWARD_NODE_RE = re.compile(r".*Backward\d*\Z")
#: runtime/driver calls that launch kernels (cudaLaunchKernel, cuLaunchKernel, hipLaunchKernel,
#: hipExtModuleLaunchKernel, cudaGraphLaunch): a launch whose kernel is missing means the trace
#: was cut. Memset/memcpy calls are left out: CUPTI drops some of them in complete traces.
LAUNCH_NAME_RE = re.compile(r".*Launch", re.I)


# ---------------------------------------------------------------------------------------------
# Compiled models (torch.compile) and graph replays, as any trace shows them (traces captured
# without traceprof's compiled-kernel table too)

#: a run of a Dynamo frame's compiled code ("Torch-Compiled Region: 0/0"; compiled autograd:
#: "Torch-Compiled Region: !0/0/0")
COMPILED_REGION_PREFIX = "Torch-Compiled Region: "
#: the autograd node that runs a compiled graph's backward
COMPILED_BACKWARD_NAME = "CompiledFunctionBackward"
#: a launch that replays a captured CUDA / HIP graph: every kernel of the graph comes from it
GRAPH_LAUNCH_NAMES = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})
#: families of kernels by name, first match wins: Inductor's Triton kernels (pointwise, reduction,
#: persistent reduction, templates), its C++ kernels (graph_<n>_cpp_fused_...), attention and
#: GEMM library kernels (cuBLAS, CUTLASS, hipBLASLt's Cijk_, nvjet)
KERNEL_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("persistent reduction", re.compile(r"triton_per_")),
    ("reduction", re.compile(r"triton_red_")),
    ("pointwise", re.compile(r"triton_poi_")),
    ("template", re.compile(r"triton_(tem|mm|bmm)_?")),
    ("C++ kernel", re.compile(r"(graph_\d+_)?cpp_fused_")),
    ("attention", re.compile(r"flash|fmha|attention|attn", re.I)),
    ("GEMM/extern", re.compile(r"gemm|gemv|matmul|cutlass|cublas|Cijk_|xmma|nvjet|_mma_|wgmma", re.I)),
)
OTHER_KERNEL_FAMILY = "other"
#: the family of an ATen op that a compiled graph calls and that launches no GPU work (an extern
#: kernel or a fallback on a CPU: ``aten::addmm`` in a run of Inductor's C++ wrapper)
EXTERN_KERNEL_FAMILY = "GEMM/extern"
ATEN_OP_PREFIX = "aten::"
#: the start and the end of a stream capture (``torch.cuda.graph``): the kernel launches between
#: them on one thread are the graph's kernels, recorded, not run (no kernel event)
GRAPH_CAPTURE_BEGIN_NAMES = frozenset(
    {
        "cudaStreamBeginCapture",
        "cudaStreamBeginCapture_v2",
        "cudaStreamBeginCaptureToGraph",
        "cuStreamBeginCapture",
        "cuStreamBeginCapture_v2",
        "hipStreamBeginCapture",
    }
)
GRAPH_CAPTURE_END_NAMES = frozenset({"cudaStreamEndCapture", "cuStreamEndCapture", "hipStreamEndCapture"})

# The compiled-kernel table's join (traces captured by traceprof.capture with the table,
# COMPILED_TABLE_KEY; docs/attribution.md "Compiled models").

#: the scope of one run of a compiled graph (a user_annotation): "## Call CompiledFxGraph <key> ##"
#: with <key> the graph's FX graph cache key, the literal "None" when the cache was bypassed
COMPILED_CALL_RE = re.compile(r"## Call CompiledFxGraph (\S+) ##\Z")
#: how views of ops (``--ops``, a diff's "changed most inside") name that scope: its cache key
#: changes from one build of a model to the next, so the runs of one graph would not match
COMPILED_CALL_LABEL = "(compiled graph run: Inductor's wrapper)"


def op_label(name: str) -> str:
    """How views of ops name an op or annotation event of ``name``: the name itself, but a
    label for spellings that change between two runs of the same work (COMPILED_CALL_LABEL)."""
    return COMPILED_CALL_LABEL if COMPILED_CALL_RE.match(name) else name


COMPILED_CALL_NO_KEY = "None"
#: the prefix of Inductor's C++ kernel events, "graph_<graph id>_<kernel>": the compile's counter,
#: shared by the forward and the backward graph of one Dynamo graph
COMPILED_KERNEL_PREFIX_RE = re.compile(r"graph_\d+_")
#: Dynamo's guard evaluation before each call of a compiled frame (outside its region)
COMPILED_CACHE_LOOKUP_NAME = "TorchDynamo Cache Lookup"
#: the table's format and version: the capture writes them, this traceprof reads up to this version
COMPILED_TABLE_FORMAT = "traceprof.compiled"
COMPILED_TABLE_VERSION = 1
#: a graph's direction in the table: its runs are in the backward pass (the others, "forward"
#: and "inference", in the forward)
COMPILED_BACKWARD_DIRECTION = "backward"
#: call-site kinds of the kernels Inductor generated (their events carry no shapes: their FLOPs
#: come from their nodes); "extern", "fallback" and "wrapper" calls are ordinary aten op events
COMPILED_GENERATED_KINDS = frozenset({"cpp", "triton"})
#: the FX node ``meta`` keys of a node's module stack, which the table's ``module_from`` repeats:
#: a node whose module stack came from the forward graph's (a backward node of a forward op);
#: a backward graph's node with its own "nn_module_stack" is a forward op computed again
COMPILED_FROM_FORWARD_STACK = "fwd_nn_module_stack"
COMPILED_OWN_STACK = "nn_module_stack"
#: torch dtype names, as the table writes a tensor's dtype -> "Input type" spellings
TORCH_DTYPE_SPELLINGS: dict[str, str] = {
    "float64": "double",
    "float32": "float",
    "float16": "c10::Half",
    "bfloat16": "c10::BFloat16",
    "float8_e4m3fn": "c10::Float8_e4m3fn",
    "float8_e4m3fnuz": "c10::Float8_e4m3fnuz",
    "float8_e5m2": "c10::Float8_e5m2",
    "float8_e5m2fnuz": "c10::Float8_e5m2fnuz",
    "float8_e8m0fnu": "c10::Float8_e8m0fnu",
    "int64": "long int",
    "int32": "int",
    "int16": "short int",
    "int8": "signed char",
    "uint8": "unsigned char",
    "bool": "bool",
    "complex64": "c10::complex<float>",
    "complex128": "c10::complex<double>",
    "complex32": "c10::complex<c10::Half>",
}
#: "Input type" of a scalar argument and of a list of scalars
SCALAR_TYPE = "Scalar"
SCALAR_LIST_TYPE = "ScalarList"


def compiled_op_event_name(op: str) -> str | None:
    """The event name of a table node's op: ``"aten.mm.default"`` -> ``"aten::mm"``; None for
    what is not a dispatcher op (``getitem``, a placeholder's name)."""
    parts = op.split(".")
    return f"{parts[0]}::{parts[1]}" if len(parts) >= 3 and parts[0] and parts[1] else None


def step_number(name: str) -> int | None:
    m = STEP_RE.match(name)
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------------------------------------
# Kernel labels: what PyTorch's own tools write on GPU work events (kernel, memcpy, memset),
# read as they are written at their sources (docs/trace-conventions.md "Kernel labels").
#
# ``torch.cuda._graph_annotations.mark_kernels(annotation)`` labels the nodes of a CUDA graph
# while it is captured; ``torch.cuda._annotate_cuda_graph_trace.annotate_trace`` merges the
# labels into a Chrome trace by each event's ``"graph node id"``: every key of each annotation
# dict becomes an arg (its value as ``str(value)``, later annotations winning), a plain string
# annotation being ``{"str": ...}``, any other object ``"annotation"``. torch's CUPTI monitor
# (``torch.profiler._cupti_monitor``) writes a dict's keys the same way and a list of
# annotations as one JSON text in ``"annotation"``.

#: a module's qualified name relative to the model (torchtitan's ``annotate_module_fqns`` and
#: ``insert_kernel_annotations_pass``: ``{"module_fqn": "layers.0.attention.wq"}``)
KERNEL_LABEL_MODULE_FQN = "module_fqn"
#: a plain string label (``mark_kernels("...")``); Inductor's cudagraph labels (PyTorch PR
#: #187061, ``triton.cudagraph_kernel_annotations``) are such strings: the compiled frame's
#: root module spelled ``L``, each module under it ``L.<qualified name>`` (some revisions add
#: the FX node's op name: ``L.layers.0.fc1.linear.addmm``), a kernel fused from the work of
#: several modules their labels joined by KERNEL_LABEL_JOINER
KERNEL_LABEL_STR = "str"
#: a label that is not a dict (``str(value)``), or the CUPTI monitor's JSON text of a list of
#: annotation dicts
KERNEL_LABEL_ANNOTATION = "annotation"
#: the source stacks of the FX nodes a compiled kernel computes, added by
#: ``torch._inductor.profiler.inductor_trace_handler`` (torch 2.14, ``TORCH_COMPILE_DEBUG_EXTEND=1``)
#: to the kernels of each compiled region: a list of Python traceback texts, outermost frame
#: first (``  File "/x/model.py", line 14, in forward\n    return self.fc(x)``)
KERNEL_LABEL_STACK = "stack"
#: the arg names above; a value of one of them nested too deeply is cut, never fatal
KERNEL_LABEL_ARGS = frozenset(
    {KERNEL_LABEL_MODULE_FQN, KERNEL_LABEL_STR, KERNEL_LABEL_ANNOTATION, KERNEL_LABEL_STACK}
)
#: the raw event attributes that hold them (RawArgs), in the order of KernelLabels' columns
KERNEL_LABEL_ATTRS = ("label_module_fqn", "label_str", "label_annotation", "label_stack")
#: how Inductor's labels join the modules of a fused kernel
KERNEL_LABEL_JOINER = " + "
#: how Inductor's labels spell the compiled frame's root module (``L['self']``)
KERNEL_LABEL_ROOT = "L"
#: a frame of a stack text
STACK_FRAME_RE = re.compile(r'File "([^"\n]+)", line (\d+), in ([^\s]+)')
#: a python_function event of a Python frame (with_stack=True): "torch/nn/modules/linear.py(124):
#: forward", the path of the file (relative to site-packages for installed packages), the line
#: its function starts at, the function's name
PYTHON_FRAME_RE = re.compile(r"(.+)\((\d+)\): (\S+)\Z", re.S)
#: the method a module's call runs
MODULE_FORWARD_NAME = "forward"


# ---------------------------------------------------------------------------------------------
# torch-tb-profiler 0.4.3 (TensorBoard's "PyTorch Profiler" tab). What its parser reads, from its
# source (torch_tb_profiler/profiler/trace.py, data.py, event_parser.py, module_op.py); the
# tb-profiler-compatible trace copy (traceprof/tensorboard/tb_profiler.py) writes these spellings.

#: the only launch category it knows (matched lower-cased); it predates cuda_runtime/cuda_driver
TBP_RUNTIME_CATEGORY = "Runtime"
#: categories traceprof reads as launches (Kind.RUNTIME) that torch-tb-profiler would drop
TBP_RENAMED_RUNTIME_CATEGORIES = frozenset(
    cat for cat, kind in _CATEGORY_KINDS.items() if kind is Kind.RUNTIME and cat != "runtime"
)
#: GPU-side copies of user annotations: it reads them as CPU annotations, so a mirrored
#: "ProfilerStep#N" becomes a second, overlapping step (and an empty step divides by zero).
#: The copy moves them to a category it ignores; trace viewers still show them.
GPU_USER_ANNOTATION_CATEGORY = "gpu_user_annotation"
TBP_IGNORED_GPU_ANNOTATION_CATEGORY = "gpu_annotation"
#: its Module view is built only from python_function events named "nn.Module: ..." that carry
#: a "Python module id" (Lightning scopes need "Framework": "pytorch-lightning" at the top level)
PYTHON_FUNCTION_CATEGORY = "python_function"
NN_MODULE_NAME_PREFIX = "nn.Module: "
PYTHON_MODULE_ID_ARG = "Python module id"
#: it loads runs from files named <worker>[.<span>].pt.trace.json[.gz]
TBP_TRACE_FILE_SUFFIX = ".pt.trace.json.gz"
#: ... and takes <worker> from the file name like this
TBP_WORKER_FILE_RE = re.compile(r"(.*?)(\.\d+)?\.pt\.trace\.json(?:\.gz)?\Z", re.I)


# ---------------------------------------------------------------------------------------------
# Values of the shape arguments ("Input Dims", "Input type", "Concrete Inputs"; record_shapes=True).
# traceprof.flops reads them only through these names.

#: "Input type" spellings of tensor element types (C++ type names, as the profiler writes them)
#: -> canonical dtype names
DTYPE_SPELLINGS: dict[str, str] = {
    "double": "fp64",
    "float": "fp32",
    "c10::Half": "fp16",
    "c10::BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8_e4m3",
    "c10::Float8_e4m3fnuz": "fp8_e4m3",
    "c10::Float8_e5m2": "fp8_e5m2",
    "c10::Float8_e5m2fnuz": "fp8_e5m2",
    "c10::Float8_e8m0fnu": "fp8_e8m0",
    "c10::Float4_e2m1fn_x2": "fp4x2",
    "long int": "int64",
    "long": "int64",
    "int": "int32",
    "short int": "int16",
    "short": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
    "c10::complex<c10::Half>": "complex32",
    "c10::qint8": "int8",
    "c10::quint8": "uint8",
    "c10::qint32": "int32",
}
#: "Input type" of a list of tensors (its "Input Dims" entry is a list of shapes; older
#: PyTorch versions leave it empty)
TENSOR_LIST_TYPE = "TensorList"
#: "Concrete Inputs" spellings of booleans
CONCRETE_TRUE = "True"
CONCRETE_FALSE = "False"
#: c10::ScalarType codes, as "Concrete Inputs" writes ScalarType arguments (out_dtype=...)
SCALAR_TYPE_CODES: dict[int, str] = {
    0: "uint8",
    1: "int8",
    2: "int16",
    3: "int32",
    4: "int64",
    5: "fp16",
    6: "fp32",
    7: "fp64",
    8: "complex32",
    9: "complex64",
    10: "complex128",
    11: "bool",
    12: "int8",
    13: "uint8",
    14: "int32",
    15: "bf16",
    23: "fp8_e5m2",
    24: "fp8_e4m3",
    25: "fp8_e5m2",
    26: "fp8_e4m3",
}

#: Top-level op or annotation names (the "not in any module" groups) that are the optimizer's
#: weight update: the ``Optimizer.step#<Class>.step`` annotation torch.optim records, and the
#: multi-tensor and fused update kernels' ops when they run outside it. Matched as prefixes.
OPTIMIZER_STEP_PREFIXES: tuple[str, ...] = (
    "Optimizer.step#",
    "aten::_foreach_",
    "aten::_fused_adam",
    "aten::_fused_adamw",
    "aten::_fused_sgd",
    "aten::_fused_adagrad",
)
#: Root module classes that replicate the model over every rank (data parallel)
DATA_PARALLEL_WRAPPERS: tuple[str, ...] = ("DistributedDataParallel", "FullyShardedDataParallel")

#: GPU kernels of collective communication libraries: NCCL (``ncclKernel_*`` before NCCL 2.19,
#: ``ncclDevKernel_*`` after; RCCL on AMD keeps these names) and RCCL's own ``rcclKernel*``,
#: possibly after a ``void `` return type. Their time is a rank's time in collectives.
COLLECTIVE_KERNEL_RE = re.compile(r"(?:void )?(?:nccl(?:Dev)?Kernel|rccl(?:Dev)?Kernel)", re.I)
#: CPU-side collectives: the process group's scopes (``gloo:all_reduce``, ``nccl:all_reduce``, run
#: on the backend's threads; they last until every rank has joined) and c10d's dispatcher ops
COLLECTIVE_CPU_RE = re.compile(r"(?:nccl|gloo|mpi|ucc|xccl):|_?c10d(?:_functional)?::|record_param_comms\Z")


def _words(alternatives: str) -> re.Pattern[str]:
    """Any of ``alternatives`` as a word of a name: not inside a longer run of letters and digits
    (``_``, ``:``, ``.``, ``#``, spaces separate words: ``copy_batch_to_gpu``, ``## forward ##``)."""
    return re.compile(rf"(?<![a-z0-9])(?:{alternatives})(?![a-z0-9])", re.I)


#: The pass a user annotation's name declares (docs/attribution.md "Traces without modules"),
#: for trees built from annotations: ``## forward ##``, ``DistributedDataParallel.forward``,
#: ``alltoall_fwd_single``; ``## backward ##``; and the work that is neither: the optimizer
#: (``## optimizer ##``, ``Optimizer.step#FusedAdam.step``, ``Optimizer.zero_grad#...``,
#: ``zero_grad``), input copies and data loading (``## copy_batch_to_gpu ##``,
#: ``enumerate(DataLoader)#...``, ``data_loading``, ``h2d``, ``to_device``) and the process
#: group's collectives (COLLECTIVE_CPU_RE: ``nccl:all_reduce``, ``gloo:all_reduce``). Values are
#: the result's pass names (``traceprof.result.model.Pass``).
ANNOTATION_PASS_SPELLINGS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("forward", _words("forward|fwd")),
    ("backward", _words("backward|bwd")),
    ("other", _words(r"optimi[sz]er|zero_grad|copy|h2d|to_device|data_?loader|data[_ ]?loading")),
)


#: annotations that are the optimizer's step (``## optimizer ##``; ``zero_grad`` is not one)
OPTIMIZER_ANNOTATION_RE = _words(r"optimi[sz]er")


def is_optimizer_annotation(name: str) -> bool:
    """Whether the annotation ``name`` is the optimizer's step."""
    return name.startswith(OPTIMIZER_STEP_PREFIXES) or OPTIMIZER_ANNOTATION_RE.search(name) is not None


#: ``zero_grad`` calls (``Optimizer.zero_grad#AdamW.zero_grad``, ``## zero_grad ##``): a training
#: step's, never the optimizer's own work (an optimizer step that holds one runs a closure)
ZERO_GRAD_RE = _words("zero_grad")


def is_zero_grad(name: str) -> bool:
    """Whether ``name`` is a ``zero_grad`` call."""
    return ZERO_GRAD_RE.search(name) is not None


def annotation_pass(name: str) -> str | None:
    """The pass (``"forward"``, ``"backward"``, ``"other"``) the annotation ``name`` declares;
    None when it names none, or several (``forward_backward``)."""
    found = {p for p, pattern in ANNOTATION_PASS_SPELLINGS if pattern.search(name)}
    if COLLECTIVE_CPU_RE.match(name):
        found.add("other")
    return found.pop() if len(found) == 1 else None


#: rank numbers in trace file names of distributed jobs (``worker3.<ms>.pt.trace.json.gz``,
#: ``rank_3``, ``rank-3``): the rank of a trace without ``distributedInfo``
RANK_IN_FILE_NAME_RE = re.compile(r"(?:rank|worker)[_-]?(\d{1,7})(?!\d)", re.I)
#: the parts of a trace file name that differ between the ranks of one job and between capture
#: windows: the rank, the ``.<milliseconds>.pt.trace`` suffix and the file extensions
JOB_FILE_NAME_VARYING_RE = re.compile(
    r"(?:(?<=rank)|(?<=worker))[_-]?\d{1,7}(?!\d)|(?:\.\d{6,})?(?:\.pt)?\.trace(?:\.json)?(?:\.gz)?\Z"
    r"|\.json(?:\.gz)?\Z",
    re.I,
)
#: file names a job directory is searched for
TRACE_FILE_SUFFIXES: tuple[str, ...] = (".json", ".json.gz")
#: the names torch.profiler's tensorboard_trace_handler gives traces; in a directory that has
#: such files, only they are taken
PROFILER_TRACE_NAME_RE = re.compile(r"\.pt\.trace\.json(?:\.gz)?\Z", re.I)

"""The compiled-kernel table: which module each kernel of a ``torch.compile`` graph works for.

A compiled model leaves no module scopes inside its graphs: the ops of a submodule are fused
into generated kernels and run from Inductor's wrapper code. While a
:class:`CompiledGraphRecorder` is active, every graph Inductor compiles (forward, backward and
inference graphs; every region of a model with graph breaks; models compiled with
``torch.compile(model)``, ``model.compile()`` or block by block) is recorded: for each call
site of its generated wrapper (a generated C++/Triton kernel, an extern kernel such as
``extern_kernels.mm``, a fallback such as ``torch.ops.aten.convolution_backward.default``) the
name of the event that call leaves in a profiler trace, and the post-grad FX nodes it computes
with their aten op, input and output shapes and dtypes, and module path. :meth:`table` returns
the document (``"format": "traceprof.compiled"``, ``"version": 1``) that the capture session
embeds into the trace under ``"traceprof_compiled"``; ``docs/trace-conventions.md`` describes
every field and how a trace event finds its row.

In short: every run of a compiled graph is a scope ``## Call CompiledFxGraph <key> ##`` whose
``<key>`` is the graph's FX graph cache key (``table["graphs"]`` is keyed by it); the scope's
direct children are the wrapper's call sites in order (``graphs[key]["calls"]``): generated C++
kernels are ``graph_<graph_id>_<kernel>`` events (``cpp.enable_kernel_profile``), extern kernels
and fallbacks ordinary ``aten::<op>`` events. Matching walks the children in time order and takes
for each the next call site whose ``event`` equals its name.

What the recorder changes while active, all undone on exit (also when the block raises):

- ``torch._inductor.config.cpp.enable_kernel_profile = True`` (else C++ kernels leave no event);
- ``torch._inductor.config.trace.provenance_tracking_level = 2`` unless already non-zero (the
  map from each kernel to the post-grad nodes it computes);
- a pass appended to ``post_grad_custom_post_pass`` that only keeps a reference to each
  post-grad graph; its ``uuid()`` enters every FX graph and AOTAutograd cache key, so graphs
  compiled without the recorder (other settings, no pass) are never taken from the caches for
  it: each is compiled for real the first time, and its row is built from its post-grad graph;
- ``torch.fx.experimental.proxy_tensor.proxy_call`` wrapped: when an op is traced as its
  decomposition, its arguments (described) are kept on the node of its first output, so that
  the table can cost the decomposed nodes as the op (``original_inputs``);
- ``ReplacementPatternEntry.replace_with_graph`` wrapped (the one place through which Inductor's
  pattern replacements insert their nodes: ``Match.replace_by_example``,
  ``Match.replace_with_graph`` and registered replacements): a node the replacement creates
  without a module stack of its own is tagged with the stack of the heaviest node it replaced
  (``module_from: "replaced"``; runs only at pattern replacements);
- ``CompiledFxGraph.post_compile`` wrapped: the one place every compiled graph passes through,
  compiled or loaded from a cache. Nothing the recorder does can fail a compile: its errors are
  collected in ``warnings``.

A graph loaded from Inductor's caches has no post-grad graph: its row comes from where the
compile that filled the cache put it: this recorder (a hit inside the session), an earlier
recorder of the process, or a file ``<inductor cache dir>/traceprof/compiled-<salt>/<key>.json``
written at that compile (so a rerun of a script with a warm cache compiles no more than without
traceprof).

:class:`compiled_module_scopes` gives modules compiled in place (``module.compile()``) an eager
scope per call for traces taken without the capture session (the session does the same itself,
see ``traceprof.capture.scopes``).

This module imports torch only inside functions: importing it does not import torch.
"""

from __future__ import annotations

import enum
import json
import math
import os
import re
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any, ClassVar

from traceprof.capture.module_paths import ModulePaths, module_path
from traceprof.capture.module_table import decode_table, encode_table
from traceprof.trace.schema import COMPILED_TABLE_KEY, traceprof_scope_name

__all__ = [
    "COMPILED_TABLE_KEY",
    "TABLE_FORMAT",
    "TABLE_VERSION",
    "CompiledGraphRecorder",
    "RecorderUnavailable",
    "compiled_in_place",
    "compiled_methods",
    "compiled_module_scopes",
    "decode_table",
    "encode_table",
    "encode_value",
    "expected_event_name",
    "failure_table",
    "inside_compiled",
    "is_compiled_model",
    "iter_call_sites",
    "module_path",
    "named_model_modules",
    "parse_wrapper_source",
    "runs_compiled",
]

TABLE_FORMAT = "traceprof.compiled"
TABLE_VERSION = 1

_KERNEL_DEF_RE = re.compile(r"^(?P<name>\w+) = async_compile\.(?P<kind>cpp_pybinding|cpp|triton)\(", re.M)
_RECORD_RE = re.compile(r'RAIIAtenRecordFunctionHandle\s+\w+\("(?P<event>[^"]+)"')
_TRITON_NAME_RE = re.compile(r"""async_compile\.triton\(\s*['"](?P<name>\w+)['"]""")
_HANDLE_RE = re.compile(r"#\s*\[Provenance debug handles\]\s*(?P<name>\S+):(?P<handle>\d+)\s*$")
_CALL_RE = re.compile(r"^(?:[\w\s,\[\]]+=\s*)?(?P<callee>[A-Za-z_][\w.]*)\(")
_INPLACE_RE = re.compile(r"^(?P<obj>buf\w*|primals_\w+|arg\w+)\.(?P<method>\w+_)\(")
_PREFIX_RE = re.compile(r"(graph_\d+_)")
_SAFE_KEY_RE = re.compile(r"[A-Za-z0-9_-]{1,200}")
#: goes into every FX graph cache key through the recorder's pass (``uuid()``); change it when the
#: recorder changes what it records, so that graphs cached by an older version compile again
_SALT = "8"
#: the format of the files that keep a graph's row next to Inductor's cache
_PERSIST_FORMAT = "traceprof.compiled.graph/1"
_OP_NAMESPACES = ("aten", "prims", "quantized", "mkldnn", "onednn")
#: nesting depth past which a described value is written as ``null``
_MAX_DEPTH = 6
#: characters of a value written as text, past which it is cut
_MAX_TEXT = 200
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: ``node.meta`` key of the module stack a pattern replacement gave a node it created
_REPLACED_KEY = "traceprof_replaced"
#: op names (without namespace and overload) of matmul, convolution and attention ops: a
#: replacement's nodes take the module of the matched node of this family over pointwise ones
_HEAVY_OP_RE = re.compile(r"\w*(mm|matmul|linear|conv\w*|attention\w*|scaled_dot_product\w*)")


class RecorderUnavailable(RuntimeError):
    """This torch lacks a hook the recorder needs (it was written against torch 2.13)."""


# -- module paths ------------------------------------------------------------------------------


def _common_module(paths: Iterable[str]) -> str:
    """The deepest module that contains all ``paths`` (``""``: the compiled root)."""
    split = [p.split(".") if p else [] for p in paths]
    common: list[str] = []
    for parts in zip(*split):
        if any(p != parts[0] for p in parts):
            break
        common.append(parts[0])
    return ".".join(common)


def _optimized_module_class() -> Any:
    """``torch._dynamo.eval_frame.OptimizedModule`` if Dynamo was imported (else nothing is compiled)."""
    import sys

    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    cls = getattr(eval_frame, "OptimizedModule", None)
    return cls if isinstance(cls, type) else None


def named_model_modules(model: Any) -> list[tuple[str, Any, Any]]:
    """``(qualified_name, module, call_target)`` for every module of ``model``, compiled or not.

    Like ``model.named_modules()`` (shared modules once, under their first name), but a
    ``torch.compile`` wrapper (``OptimizedModule``, at the root or as a submodule:
    ``model.blocks[0] = torch.compile(block)``) stands for the module it wraps: ``module`` is the
    original module, named without ``_orig_mod.``, and ``call_target`` is the wrapper, whose
    hooks run eagerly around the compiled call. For every other module ``call_target`` is the
    module itself.
    """
    optimized = _optimized_module_class()
    out: list[tuple[str, Any, Any]] = []
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [("", model)]
    while stack:
        name, wrapper = stack.pop()
        module = wrapper
        while optimized is not None and isinstance(module, optimized):
            module = module._orig_mod
        if id(module) in seen:
            continue
        seen.add(id(module))
        out.append((name, module, wrapper))
        children = [
            (f"{name}.{n}" if name else str(n), c) for n, c in module._modules.items() if c is not None
        ]
        stack.extend(reversed(children))  # depth first, in registration order
    return out


def compiled_in_place(module: Any) -> Any:
    """The compiled ``_call_impl`` of a module compiled with ``module.compile()``, else ``None``."""
    return getattr(module, "__dict__", {}).get("_compiled_call_impl")


def compiled_methods(module: Any) -> dict[str, Any]:
    """Methods of ``module`` replaced on the instance by ``torch.compile``d callables, by name:
    ``model.forward = torch.compile(model.forward)``, or Lightning's ``from_compiled`` (what
    ``trainer.fit(torch.compile(lit_module))`` does), which compiles ``forward``,
    ``training_step`` and the other step methods this way. Functions that
    ``torch.compiler.disable`` wrapped are not compiled."""
    out = {}
    for name, value in getattr(module, "__dict__", {}).items():
        if (
            callable(value)
            and getattr(value, "_torchdynamo_orig_callable", None) is not None
            and not getattr(value, "_torchdynamo_disable", False)
        ):
            out[str(name)] = value
    return out


def runs_compiled(name: str, module: Any, call_target: Any) -> bool:
    """The module's calls run compiled code: a ``torch.compile`` wrapper, compiled in place, or
    with compiled methods (:func:`compiled_methods`)."""
    return (
        call_target is not module or compiled_in_place(module) is not None or bool(compiled_methods(module))
    )


def inside_compiled(named: list[tuple[str, Any, Any]]) -> set[str]:
    """Names of the modules of ``named`` (:func:`named_model_modules`) that are called from
    inside compiled code: the descendants of modules that :func:`runs_compiled`.

    Hooks on these would be traced into the graphs, and Dynamo guards on the hook ids (per
    module, so blocks compiled one by one would each recompile, and every graph traced with the
    hooks would recompile once they are removed); they give no scope there anyway.
    """
    roots = [name for name, module, target in named if runs_compiled(name, module, target)]
    return {
        name
        for name, _, _ in named
        if any(name != root and (root == "" or name.startswith(root + ".")) for root in roots)
    }


def is_compiled_model(model: Any) -> bool:
    """``model`` is, or holds, a ``torch.compile`` wrapper or a module compiled in place."""
    return any(runs_compiled(*entry) for entry in named_model_modules(model))


# -- wrapper source ----------------------------------------------------------------------------


def expected_event_name(callee: str) -> str | None:
    """The name of the profiler event a wrapper call of ``callee`` leaves (``None``: unknown).

    ``extern_kernels.addmm`` -> ``aten::addmm``;
    ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default`` ->
    ``aten::_scaled_dot_product_flash_attention_for_cpu``; ``aten.randint.low_out`` ->
    ``aten::randint``; ``extern_kernels._mkl_linear`` -> ``mkl::_mkl_linear``. Extern kernels
    that are Python functions (``bias_addmm``, ``conv1x1_via_mm``) give ``None``.
    """
    parts = callee.split(".")
    if parts[0] == "extern_kernels" and len(parts) >= 2:
        try:
            from torch._inductor.select_algorithm import extern_kernels
        except Exception:  # torch without Inductor
            return None
        fn: Any = extern_kernels
        for p in parts[1:]:
            fn = getattr(fn, p, None)
            if fn is None:
                return None
        schema = getattr(fn, "_schema", None)
        if schema is not None:
            return str(schema.name)
        qualified = getattr(fn, "_qualified_op_name", None)
        if qualified:
            return str(qualified)
        if type(fn).__name__ == "builtin_function_or_method":  # torch.mm and friends
            return "aten::" + str(fn.__name__)
        return None
    if parts[0] == "torch" and len(parts) >= 4 and parts[1] == "ops":
        return f"{parts[2]}::{parts[3]}"
    if parts[0] in _OP_NAMESPACES and len(parts) >= 2:
        return f"{parts[0]}::{parts[1]}"
    return None


def _call_site(line: str, kernels: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The call site a line of the wrapper's ``call`` function makes, or ``None``."""
    call = _CALL_RE.match(line)
    callee = call.group("callee") if call else None
    if callee and callee.endswith(".run") and callee[: -len(".run")] in kernels:
        callee = callee[: -len(".run")]  # a Triton kernel: ``triton_poi_fused_0.run(..., stream=stream0)``
    if callee in kernels:
        return {"kernel": callee, "kind": kernels[callee]["kind"], "event": kernels[callee]["event"]}
    if callee and callee.startswith("extern_kernels."):
        return {"kernel": callee, "kind": "extern", "event": expected_event_name(callee)}
    if (
        callee
        and (callee.startswith("torch.ops.") or callee.split(".")[0] in _OP_NAMESPACES)
        and callee.count(".") >= 2
    ):
        return {"kernel": callee, "kind": "fallback", "event": expected_event_name(callee)}
    inplace = _INPLACE_RE.match(line)
    if inplace:  # buf.zero_(), buf.copy_(...): a dispatcher call made by the wrapper itself
        method = inplace.group("method")
        return {"kernel": f"{inplace.group('obj')}.{method}", "kind": "wrapper", "event": f"aten::{method}"}
    return None


def parse_wrapper_source(source: str) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Kernel definitions and call sites of an Inductor Python wrapper module.

    Returns ``(kernels, calls)``. ``kernels`` maps a kernel's Python name to ``{"kind", "event"}``
    where ``event`` is the name its profiler record carries (C++: the string of its
    ``RAIIAtenRecordFunctionHandle``, ``graph_<n>_<kernel>``, or ``None`` when it was compiled
    without ``cpp.enable_kernel_profile``; Triton: the kernel's name, unverified). ``calls``
    lists the call sites of the ``call`` function in order: ``{"kernel", "kind", "event",
    "handle"}``, with ``handle`` the provenance debug handle of the ``# [Provenance debug
    handles]`` comment above the call (``None`` without one).
    """
    kernels: dict[str, dict[str, Any]] = {}
    defs = list(_KERNEL_DEF_RE.finditer(source))
    for i, d in enumerate(defs):
        end = defs[i + 1].start() if i + 1 < len(defs) else len(source)
        body = source[d.start() : end]
        kind = "triton" if d.group("kind") == "triton" else "cpp"
        event: str | None
        if kind == "cpp":
            r = _RECORD_RE.search(body)
            event = r.group("event") if r else None
        else:
            t = _TRITON_NAME_RE.search(body)
            event = t.group("name") if t else d.group("name")
        kernels[d.group("name")] = {"kind": kind, "event": event}

    start = source.find("def call(")
    calls: list[dict[str, Any]] = []
    if start < 0:
        return kernels, calls
    pending: tuple[str, int] | None = None
    for raw in source[start:].splitlines()[1:]:
        line = raw.strip()
        if not line:
            continue
        if not raw.startswith((" ", "\t")):  # the end of the call function (dedent)
            break
        if line.startswith("#"):
            h = _HANDLE_RE.search(line)
            if h:
                pending = (h.group("name"), int(h.group("handle")))
            continue
        site = _call_site(line, kernels)
        if site is None:
            continue
        site["handle"] = pending[1] if pending is not None and pending[0] == site["kernel"] else None
        pending = None
        calls.append(site)
    return kernels, calls


# -- node descriptions ---------------------------------------------------------------------------


def _describe_val(val: Any, depth: int = 0) -> Any:
    """Shape and dtype of a ``node.meta["val"]`` (fake tensor, SymInt, tuples of them), or any
    other value, in the table's value encoding (:func:`encode_value`)."""
    return encode_value(val, depth)


def encode_value(value: Any, depth: int = 0) -> Any:
    """A value met in a graph (a node's argument or output, a constant) as JSON that any strict
    writer accepts, in the encoding of ``docs/trace-conventions.md`` ("Values"):

    - a tensor (fake or real, a constant too): ``{"shape": [...], "dtype": "float32"}``, a
      symbolic size as its expression (``"s0"``, ``"2*s1"``); int() would specialize it;
    - ``None``, a bool, a str, an int within 64 bits, a finite float: as it is;
    - a non-finite float: ``{"float": "inf"}``, ``"-inf"`` or ``"nan"`` (causal masks filled
      with ``-inf``); an int beyond 64 bits: ``{"int": "<decimal digits>"}``;
    - a symbolic scalar: ``{"sym": "s0"}``; a dtype: ``{"dtype": "float32"}``; a device:
      ``{"device": "cpu"}``; an enum or torch constant (layout, memory format):
      ``{"enum": "torch.contiguous_format"}``;
    - a list or tuple: a list; a dict: an object with text keys;
    - anything else: its ``str()``, cut to ``_MAX_TEXT`` characters; nesting past ``_MAX_DEPTH``:
      ``null``.
    """
    if depth > _MAX_DEPTH:
        return None
    if value is None or isinstance(value, (bool, str)):
        return value if not isinstance(value, str) else value[:_MAX_TEXT]
    if isinstance(value, int):
        return value if _INT64_MIN <= value <= _INT64_MAX else {"int": str(value)}
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    kind = type(value).__name__
    if kind in ("SymInt", "SymFloat", "SymBool"):
        return {"sym": str(value)[:_MAX_TEXT]}
    if hasattr(value, "op") and hasattr(value, "meta") and hasattr(value, "target"):  # an fx.Node
        return encode_value(value.meta.get("val"), depth)
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None and not isinstance(value, type):
        try:
            dims = [d if isinstance(d, int) else str(d)[:_MAX_TEXT] for d in shape]
        except TypeError:  # a shape that is not a sequence
            dims = None
        if dims is not None:
            return {"shape": dims, "dtype": _dtype_name(dtype)}
    if kind == "dtype":
        return {"dtype": _dtype_name(value)}
    if kind == "device":
        return {"device": str(value)[:_MAX_TEXT]}
    if kind in ("layout", "memory_format", "qscheme") or isinstance(value, enum.Enum):
        return {"enum": str(value)[:_MAX_TEXT]}
    if isinstance(value, (list, tuple)):
        return [encode_value(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k)[:_MAX_TEXT]: encode_value(v, depth + 1) for k, v in value.items()}
    try:
        return str(value)[:_MAX_TEXT]
    except Exception:  # a str() that fails: only a description is lost
        return f"<{kind}>"


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")[:_MAX_TEXT]


def _describe_arg(arg: Any, depth: int = 0) -> Any:
    return encode_value(arg, depth)


def _event_of_op(op: str) -> str | None:
    """``"aten.addmm.default"`` -> ``"aten::addmm"`` (the event name of a dispatcher call)."""
    parts = op.split(".")
    return f"{parts[0]}::{parts[1]}" if len(parts) >= 3 else None


def _op_name(target: Any) -> str:
    if type(target).__name__ in ("OpOverload", "OpOverloadPacket", "HigherOrderOperator"):
        return str(target)  # "aten.mm.default"
    name = getattr(target, "__name__", None)
    return str(name) if name else str(target)


def _module_stack(node: Any, replaced: bool = False) -> list[tuple[str, str, str]]:
    """``[(key, source_name, class_name), ...]``, outermost first; backward nodes use the forward's.

    ``replaced``: without a stack of its own, the one a pattern replacement gave the node
    (:func:`_wrap_replace_with_graph`).
    """
    stack = node.meta.get("fwd_nn_module_stack") or node.meta.get("nn_module_stack") or {}
    if not stack and replaced:
        stack = node.meta.get(_REPLACED_KEY) or {}
    out = []
    for key, value in stack.items():
        try:
            source, cls = value
        except (TypeError, ValueError):
            continue
        cls_name = cls.__name__ if isinstance(cls, type) else str(cls).rsplit(".", 1)[-1]
        out.append((str(key), str(source), cls_name))
    return out


def _describe_node(node: Any, paths: ModulePaths) -> dict[str, Any]:
    """Op, input and output shapes, and module of a post-grad node.

    ``module`` is the qualified name of the innermost module of the node's module stack,
    relative to the compiled frame's root local (``root_local``, usually ``L['self']``); ``""``
    when the node has no stack (code of the compiled function itself, autograd's gradient sums
    in a backward graph). A node that a pattern replacement created takes the module of the
    heaviest node it replaced (``mm + add -> addmm_default``: the ``mm``'s;
    :func:`_wrap_replace_with_graph`). A ``copy_`` that writes a mutated input back (BatchNorm's
    running statistics) takes the module of the value it copies. Another node without a stack
    and without ``seq_nr`` (which every node traced from the model's code has: a node some other
    pass made) takes the module its inputs give it (:func:`_module_of_inputs`). ``module_from``
    says which of these applied (``None``: no stack).
    """
    stack = _module_stack(node)
    module_from: str | None = None
    derived: tuple[str, str | None, str | None] | None = None
    if stack:
        module_from = "fwd_nn_module_stack" if "fwd_nn_module_stack" in node.meta else "nn_module_stack"
    elif node.meta.get(_REPLACED_KEY):
        stack = _module_stack(node, replaced=True)
        module_from = "replaced" if stack else None
    elif (
        _op_name(node.target) == "aten.copy_.default"
        and len(node.args) >= 2
        and hasattr(node.args[1], "meta")
    ):
        stack = _module_stack(node.args[1])
        module_from = "copy_source" if stack else None
    elif _pattern_made(node):
        derived = _module_of_inputs(node, {}, paths)
        module_from = "inputs" if derived is not None else None
    row: dict[str, Any] = {
        "op": _op_name(node.target),
        "inputs": [_describe_arg(a) for a in node.args],
        "output": _describe_val(node.meta.get("val")),
    }
    if node.kwargs:
        row["kwargs"] = {str(k): _describe_arg(v) for k, v in node.kwargs.items()}
    if stack:
        key, source, cls_name = stack[-1]
        row["root_local"], row["module"] = paths.resolve(key, source)
        row["module_class"] = cls_name
    elif derived is not None:
        row["module"], row["module_class"], row["root_local"] = derived
    else:
        row["module"] = ""
        row["module_class"] = None
    row["module_from"] = module_from
    original = node.meta.get("original_aten")
    if original is not None and _op_name(original) != row["op"] and "seq_nr" in node.meta:
        # one of the nodes an op was decomposed into: the group is that op's call
        row["original_aten"] = _op_name(original)
        row["original_group"] = f"{node.meta['seq_nr']}:{row['original_aten']}"
        described = node.meta.get("traceprof_original")
        if isinstance(described, tuple) and len(described) == 2 and described[0] == row["original_aten"]:
            row["original_inputs"] = described[1]  # on the node of the op's first output
    return row


def _bindings(graph: Any, example_inputs: Any) -> dict[str, int]:
    """Symbolic sizes of a graph compiled with dynamic shapes (``"s0"``) bound to the sizes of
    the inputs it was compiled for: a placeholder's symbolic dims to the example's dims, a
    symbolic scalar to the example's value."""
    out: dict[str, int] = {}
    try:
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        for node, example in zip(placeholders, list(example_inputs or ())):
            val = node.meta.get("val")
            if type(val).__name__ == "SymInt" and isinstance(example, int):
                out[str(val)] = int(example)
            shape, real = getattr(val, "shape", None), getattr(example, "shape", None)
            if shape is not None and real is not None and len(shape) == len(real):
                for d, r in zip(shape, real):
                    if not isinstance(d, int):
                        out[str(d)] = int(r)
    except Exception:  # a description is lost, never a compile
        return {}
    return out


def _bound(value: Any, bindings: dict[str, int]) -> Any:
    """``value`` described, its symbolic sizes replaced by the ints they are bound to."""
    if isinstance(value, dict) and isinstance(value.get("shape"), list):
        return {**value, "shape": [bindings.get(d, d) if isinstance(d, str) else d for d in value["shape"]]}
    if isinstance(value, list):
        return [_bound(v, bindings) for v in value]
    return value


def _module_outputs(graph: Any, paths: ModulePaths, bindings: dict[str, int]) -> dict[str, Any]:
    """Relative module path -> its output's value described: the value of the last node, in
    graph order, computed inside the module (a node whose module stack holds it) and used by a
    node outside it; without one, the module's last node. The module's hooks do not run inside
    compiled code, so this stands for the output they would record (the module table's
    ``outputs``: torchinfo's mult-adds and pass size need it)."""
    inside: dict[Any, set[str]] = {}
    for node in graph.nodes:
        if node.op == "call_function":
            inside[node] = {paths.resolve(key, source)[1] for key, source, _ in _module_stack(node)}
    last: dict[str, Any] = {}
    escaping: dict[str, Any] = {}
    for node, modules in inside.items():
        users = [inside.get(u) for u in node.users if u.op == "call_function"]
        for module in modules:
            last[module] = node
            # its value is used by code outside the module: what the module returned (values
            # kept for the backward go to the graph's output, not to a call)
            if any(u is not None and module not in u for u in users):
                escaping[module] = node
    return {
        module: _bound(encode_value(escaping.get(module, node).meta.get("val")), bindings)
        for module, node in last.items()
    }


def _pattern_made(node: Any) -> bool:
    """A node that a pass made (one that no pattern replacement tagged): not traced from the
    model's code (no ``seq_nr``) and without a module stack of its own."""
    return (
        node.op == "call_function"
        and "seq_nr" not in node.meta
        and not node.meta.get("nn_module_stack")
        and not node.meta.get("fwd_nn_module_stack")
    )


def _module_of_inputs(
    node: Any,
    memo: dict[str, tuple[str, str | None, str | None] | None],
    paths: ModulePaths,
    depth: int = 0,
) -> tuple[str, str | None, str | None] | None:
    """``(module, class, root_local)`` of a pass-made node: the deepest module common to its
    input nodes that have one (their own stack, one a pattern replacement gave them, or derived
    the same way for pass-made inputs;
    inputs of the compiled code itself, placeholders and root ops, do not pull it up); ``None``
    when no input has a module. The class is that of an input in exactly that module (else
    ``None``)."""
    if node.name in memo:
        return memo[node.name]
    memo[node.name] = None  # cycles cannot occur in a graph; this bounds odd metadata
    found: list[tuple[str, str | None, str | None]] = []
    for arg in node.all_input_nodes:
        stack = _module_stack(arg, replaced=True)
        if stack:
            key, source, cls_name = stack[-1]
            root, qualified = paths.resolve(key, source)
            found.append((qualified, cls_name, root))
        elif depth < _MAX_DEPTH and _pattern_made(arg):
            inner = _module_of_inputs(arg, memo, paths, depth + 1)
            if inner is not None:
                found.append(inner)
    if not found:
        return None
    module = _common_module(f[0] for f in found)
    class_name = next((f[1] for f in found if f[0] == module), None)
    roots = {f[2] for f in found}
    memo[node.name] = result = (module, class_name, roots.pop() if len(roots) == 1 else None)
    return result


def _assign_modules(
    calls: list[dict[str, Any]],
    nodes: dict[str, Any],
    provenance: dict[str, list[str]],
    offsets: dict[str, int],
    paths: ModulePaths,
) -> dict[str, dict[str, Any]]:
    """Fill ``nodes``, ``module``, ``modules``, ``module_from`` (and ``primary_node``) of each call
    site from the provenance map; return the described nodes by name."""
    used: dict[str, dict[str, Any]] = {}
    for site in calls:
        names: list[str] = []
        if site["handle"] is not None:
            handle_key = f"{site['kernel']}:{site['handle']}"
            # handles restart in every provenance context: keep only what this graph added
            names = list(provenance.get(handle_key, [])[offsets.get(handle_key, 0) :])
        site["nodes"] = names
        site["module"] = None
        site["module_from"] = None
        modules, known = [], []
        for name in names:
            node = nodes.get(name)
            if node is None:
                continue
            if name not in used:
                used[name] = _describe_node(node, paths)
            modules.append(used[name]["module"])
            if used[name]["module_from"] is not None:
                known.append(used[name]["module"])
        if not modules:
            continue
        site["modules"] = dict(Counter(modules))
        # nodes without a module stack (gradient sums, pattern-made nodes) do not pull a fused
        # kernel up to the root
        site["module"] = _common_module(known) if known else ""
        site["module_from"] = "nodes"
        if site["kind"] in ("extern", "fallback") and site["event"]:
            # the node the extern call computes (its other nodes are views feeding it)
            primary = [n for n in names if n in used and _event_of_op(used[n]["op"]) == site["event"]]
            if len(primary) == 1:
                site["primary_node"] = primary[0]
                site["module"] = used[primary[0]]["module"]
                site["module_from"] = "primary_node"
    # call sites Inductor gave no provenance handle (the scatter_reduce_ of max_pool2d's backward,
    # emitted while lowering another node): the module of the call site before (or after) them
    assigned = ("nodes", "primary_node")
    for i, site in enumerate(calls):
        if site["module"] is not None:
            continue
        before = next((c for c in reversed(calls[:i]) if c["module_from"] in assigned), None)
        after = next((c for c in calls[i + 1 :] if c["module_from"] in assigned), None)
        near = before if before is not None else after
        if near is not None:
            site["module"] = near["module"]
            site["module_from"] = "previous_call" if near is before else "next_call"
    return used


# -- the recorder ----------------------------------------------------------------------------------


class _PendingGraph:
    """A post-grad graph seen by the recorder's pass, waiting for its ``post_compile``."""

    __slots__ = ("graph", "paths", "placeholders", "provenance_lengths")

    def __init__(self, graph: Any, provenance_lengths: dict[str, int]) -> None:
        self.graph = graph
        self.paths: ModulePaths | None = None
        self.provenance_lengths = provenance_lengths
        self.placeholders = sum(1 for n in graph.nodes if n.op == "placeholder")


def _provenance_map() -> dict[str, list[str]]:
    import torch._inductor.debug as inductor_debug

    return getattr(inductor_debug, "_inductor_triton_kernel_to_post_grad_node_info", None) or {}


def _with_pass(current: Any, ours: Any, version: str) -> Any:
    """The value of ``post_grad_custom_post_pass`` with our pass after the user's: a list where
    this torch runs several (2.12 on), ours alone where it runs one and none is set (2.11)."""
    try:
        from torch._inductor.custom_graph_pass import get_custom_graph_passes
    except ImportError:  # one pass only
        if current is not None:
            raise RecorderUnavailable(
                f"torch {version} runs one post-grad pass and one is already set"
            ) from None
        return ours
    passes = get_custom_graph_passes(current)
    return [*passes, ours] if passes else ours


def _make_pass(recorder: CompiledGraphRecorder) -> Any:
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class TraceprofRecordPass(CustomGraphPass):
        """A post-grad pass that only remembers the graph (it changes nothing)."""

        def __call__(self, graph: Any) -> None:
            recorder._on_post_grad_graph(graph)

        def uuid(self) -> str:
            return f"traceprof-compiled-table-v{TABLE_VERSION}-{recorder.salt}"

    return TraceprofRecordPass()


class CompiledGraphRecorder:
    """Record every graph Inductor compiles while active; :meth:`table` returns the table.

    ::

        with CompiledGraphRecorder(model) as rec:
            train_step()                       # the first call compiles: recorded
            with torch.profiler.profile(...) as prof:
                train_step()
                prof.add_metadata(COMPILED_TABLE_KEY, encode_table(rec.table()))

    ``model`` (optional) is the user's model: it names the module each compiled frame ran on
    (``compiles[i]["root"]``: ``"blocks.0"`` for a block compiled alone, ``""`` for the whole
    model) by looking the module ids of ``nn_module_stack`` up in the model's modules at
    compile time. ``salt`` goes into the pass's ``uuid()`` and so into every cache key (a new
    salt compiles everything again). ``persist``: keep each row in a file next to Inductor's
    cache and read it back on a cache hit. Graphs compiled before any recorder was active are not
    recorded (Dynamo reuses them without compiling): enter it before the first call. Graphs an
    earlier recorder of this process recorded are kept when it exits, and ``table(earlier=...)``
    can include them (marked ``"earlier_session": true``): Dynamo keeps running those graphs in
    a later session without compiling them again (a second session, ``profile_once`` twice).

    Only one recorder can be active at a time. ``__enter__`` raises :class:`RecorderUnavailable`
    when this torch lacks a hook the recorder needs, having changed nothing.
    """

    _active: CompiledGraphRecorder | None = None
    _lock = threading.Lock()
    #: graphs and compiles that recorders of this process recorded, for later sessions
    _earlier_graphs: ClassVar[dict[str, dict[str, Any]]] = {}
    _earlier_compiles: ClassVar[list[dict[str, Any]]] = []
    #: at most this many graphs are kept for later sessions (the oldest are dropped)
    EARLIER_GRAPHS_LIMIT = 2048

    def __init__(self, model: Any = None, *, salt: str = _SALT, persist: bool = True) -> None:
        self.model = model
        self.salt = salt
        self.persist = persist
        self.graphs: dict[str, dict[str, Any]] = {}
        self.compiles: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self.changes = 0  #: counts recorded compiles and cache hits: a new table when it grows
        self._local = threading.local()
        self._saved: dict[str, Any] = {}
        self._patched: Any = None  # our post_compile wrapper while installed
        self._original: Any = None
        self._proxy_patched: Any = None  # our proxy_call wrapper while installed
        self._proxy_original: Any = None
        self._replace_patched: Any = None  # our replace_with_graph wrapper while installed
        self._replace_original: Any = None
        self._active_flag = False
        self._torch_version = ""
        self._module_names: dict[int, tuple[str, str]] | None = None  # id -> (name, class)
        self._mutex = threading.RLock()  # a compile on another thread while table() reads

    # -- context manager ---------------------------------------------------------------------

    def __enter__(self) -> CompiledGraphRecorder:
        import torch

        try:
            import torch._inductor.config as inductor_config
            import torch._inductor.custom_graph_pass  # the pass base class
            import torch._inductor.debug  # the provenance map
            from torch._inductor.output_code import CompiledFxGraph
        except Exception as e:
            raise RecorderUnavailable(f"torch {torch.__version__} has no Inductor hooks: {e}") from e
        if "post_compile" not in CompiledFxGraph.__dict__:
            raise RecorderUnavailable(f"torch {torch.__version__}: no CompiledFxGraph.post_compile")
        if not hasattr(inductor_config.trace, "provenance_tracking_level") or not hasattr(
            inductor_config.cpp, "enable_kernel_profile"
        ):
            raise RecorderUnavailable(f"torch {torch.__version__}: no provenance tracking in Inductor")
        with CompiledGraphRecorder._lock:
            if CompiledGraphRecorder._active is not None:
                raise RuntimeError("a CompiledGraphRecorder is already active")
            CompiledGraphRecorder._active = self
        self._torch_version = str(torch.__version__)
        try:
            self._saved = {
                "cpp.enable_kernel_profile": inductor_config.cpp.enable_kernel_profile,
                "trace.provenance_tracking_level": inductor_config.trace.provenance_tracking_level,
                "post_grad_custom_post_pass": inductor_config.post_grad_custom_post_pass,
            }
            inductor_config.cpp.enable_kernel_profile = True
            if not inductor_config.trace.provenance_tracking_level:
                inductor_config.trace.provenance_tracking_level = 2
            ours = _make_pass(self)
            inductor_config.post_grad_custom_post_pass = _with_pass(
                inductor_config.post_grad_custom_post_pass, ours, str(torch.__version__)
            )

            self._original = CompiledFxGraph.__dict__["post_compile"]
            self._patched = _wrap_post_compile(self, self._original)
            CompiledFxGraph.post_compile = self._patched  # type: ignore[method-assign]
            import torch.fx.experimental.proxy_tensor as proxy_tensor

            if callable(getattr(proxy_tensor, "proxy_call", None)):  # else: no original_inputs
                self._proxy_original = proxy_tensor.proxy_call
                self._proxy_patched = _wrap_proxy_call(self._proxy_original)
                proxy_tensor.proxy_call = self._proxy_patched
            self._install_replace_hook()
            self._active_flag = True
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _install_replace_hook(self) -> None:
        """Wrap ``ReplacementPatternEntry.replace_with_graph`` (a static method) when this torch
        has it; else pattern-made nodes keep the module of their inputs (``"inputs"``)."""
        try:
            from torch._inductor.pattern_matcher import ReplacementPatternEntry
        except Exception:
            return
        original = ReplacementPatternEntry.__dict__.get("replace_with_graph")
        if not isinstance(original, staticmethod):
            return
        self._replace_original = original
        self._replace_patched = staticmethod(_wrap_replace_with_graph(original.__func__))
        ReplacementPatternEntry.replace_with_graph = self._replace_patched  # type: ignore[method-assign]

    def _restore_replace_hook(self) -> None:
        if self._replace_patched is None:
            return
        from torch._inductor.pattern_matcher import ReplacementPatternEntry

        if ReplacementPatternEntry.__dict__.get("replace_with_graph") is self._replace_patched:
            ReplacementPatternEntry.replace_with_graph = self._replace_original  # type: ignore[method-assign]
        # else someone patched it after us: our wrapper stays below theirs (it only tags nodes)
        self._replace_patched = self._replace_original = None

    @property
    def active(self) -> bool:
        return self._active_flag

    def _restore(self) -> None:
        """Undo every change, whatever state ``__enter__`` reached; safe to call twice."""
        self._active_flag = False
        errors = []
        try:
            from torch._inductor.output_code import CompiledFxGraph

            if self._patched is not None and CompiledFxGraph.__dict__.get("post_compile") is self._patched:
                CompiledFxGraph.post_compile = self._original  # type: ignore[method-assign]
            # else someone patched it after us: our wrapper stays below theirs, inactive
        except Exception as e:
            errors.append(e)
        self._patched = self._original = None
        if self._proxy_patched is not None:
            import torch.fx.experimental.proxy_tensor as proxy_tensor

            if proxy_tensor.proxy_call is self._proxy_patched:
                proxy_tensor.proxy_call = self._proxy_original
            self._proxy_patched = self._proxy_original = None
        try:
            self._restore_replace_hook()
        except Exception as e:
            errors.append(e)
        if self._saved:
            import torch._inductor.config as inductor_config

            saved, self._saved = self._saved, {}
            for dotted, value in saved.items():
                try:
                    target: Any = inductor_config
                    *path, attr = dotted.split(".")
                    for part in path:
                        target = getattr(target, part)
                    setattr(target, attr, value)
                except Exception as e:
                    errors.append(e)
        with CompiledGraphRecorder._lock:
            if CompiledGraphRecorder._active is self:
                CompiledGraphRecorder._active = None
                self._keep_for_later()
        self._local = threading.local()
        self._module_names = None
        if errors:
            raise errors[0]

    def _keep_for_later(self) -> None:
        """Add this recorder's graphs to the process's earlier graphs (under ``_lock``)."""
        cls = CompiledGraphRecorder
        for key, graph in self.graphs.items():
            if graph.get("nodes_source") == "post_grad_pass" or key not in cls._earlier_graphs:
                cls._earlier_graphs.pop(key, None)
                cls._earlier_graphs[key] = graph
        keys = set(self.graphs)
        cls._earlier_compiles = [c for c in cls._earlier_compiles if c["key"] not in keys] + [
            c for c in self.compiles if c["table_from"] is not None
        ]
        while len(cls._earlier_graphs) > cls.EARLIER_GRAPHS_LIMIT:
            cls._earlier_graphs.pop(next(iter(cls._earlier_graphs)))
        kept = set(cls._earlier_graphs)
        cls._earlier_compiles = [c for c in cls._earlier_compiles if c["key"] in kept]

    # -- hooks ---------------------------------------------------------------------------------

    def _on_post_grad_graph(self, graph: Any) -> None:
        if not self._active_flag:
            return
        try:
            lengths = {k: len(v) for k, v in _provenance_map().items()}
            self._local.pending = _PendingGraph(graph, lengths)
        except Exception as e:  # recording must never break a compile
            self._local.pending = None
            self.warnings.append(f"post-grad pass failed: {type(e).__name__}: {e}")

    def _on_compiled(self, compiled: Any, example_inputs: Any, graph_kwargs: Any) -> None:
        from torch._guards import CompileContext

        pending: _PendingGraph | None = getattr(self._local, "pending", None)
        self._local.pending = None
        if pending is not None and example_inputs is not None and pending.placeholders != len(example_inputs):
            self.warnings.append(
                f"a post-grad graph with {pending.placeholders} inputs does not fit a compiled graph"
                f" with {len(example_inputs)}: recorded as a cache hit"
            )
            pending = None
        graph_kwargs = graph_kwargs or {}
        if graph_kwargs.get("is_backward"):
            direction = "backward"
        elif graph_kwargs.get("is_inference"):
            direction = "inference"
        else:
            direction = "forward"
        graph_id = graph_kwargs.get("graph_id")
        compile_id = CompileContext.current_compile_id()
        compile_id_s = str(compile_id) if compile_id is not None else None
        key = getattr(compiled, "_fx_graph_cache_key", None)
        table_key = key if key is not None else f"nokey:{graph_id}:{direction}"
        source = getattr(compiled, "source_code", None) or ""

        root: str | None = None
        root_class: str | None = None
        table_from: str | None
        entry = self.graphs.get(table_key)
        if pending is not None:  # a real compile: the table row comes from its post-grad graph
            old_ids = entry["compile_ids"] if entry is not None else []
            entry = self._build_entry(
                table_key, key, direction, graph_id, source, pending, _bindings(pending.graph, example_inputs)
            )
            entry["compile_ids"] = list(old_ids)
            self.graphs[table_key] = entry
            root, root_class = self._root_module(pending)
            table_from = "compile"
            if key is not None and self.persist:
                self._persist(key, entry, root, root_class)
        elif entry is not None:  # compiled earlier in this session
            table_from = "session"
            root, root_class = next(
                (
                    (c["root"], c["root_class"])
                    for c in self.compiles
                    if c["key"] == table_key and c["root"] is not None
                ),
                (None, None),
            )
        else:  # a cache hit on a graph that an earlier session or process compiled
            found = self._recorded_elsewhere(key) if key is not None else None
            if found is not None:
                entry, root, root_class, table_from = found
                # the module under that name in this model (the class may be a new one)
                root_class = self._classes_by_name().get(root or "", root_class) if root is not None else None
            else:
                entry = self._build_entry(table_key, key, direction, graph_id, source, None)
                table_from = None
                self.warnings.append(
                    f"graph {table_key} came from Inductor's cache without its recorded table: its"
                    " kernels have no module paths"
                )
            self.graphs[table_key] = entry
        if compile_id_s is not None and compile_id_s not in entry["compile_ids"]:
            entry["compile_ids"].append(compile_id_s)
        self.compiles.append(
            {
                "compile_id": compile_id_s,
                "direction": direction,
                "graph_id": graph_id,
                "key": table_key,
                "cache": "compiled" if pending is not None else "cache_hit",
                "root": root,
                "root_class": root_class,
                "table_from": table_from,
            }
        )
        self.changes += 1

    # -- graphs recorded elsewhere ----------------------------------------------------------------

    @staticmethod
    def _persist_path(key: str) -> str | None:
        """Where the row of graph ``key`` is kept, next to Inductor's own cache (``None``: a key
        that is no file name)."""
        if not _SAFE_KEY_RE.fullmatch(key):
            return None
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        return os.path.join(cache_dir(), "traceprof", f"compiled-{_SALT}", f"{key}.json")

    def _persist(self, key: str, entry: dict[str, Any], root: str | None, root_class: str | None) -> None:
        """Write the row of a graph compiled for real, for cache hits of later processes."""
        try:
            path = self._persist_path(key)
            if path is None:
                return
            os.makedirs(os.path.dirname(path), exist_ok=True)
            document = {"format": _PERSIST_FORMAT, "graph": entry, "root": root, "root_class": root_class}
            import tempfile  # only where a row is saved: a one-trace analysis never needs it

            fd, tmp = tempfile.mkstemp(prefix=".tmp", suffix=".json", dir=os.path.dirname(path))
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(document, f, default=str, separators=(",", ":"))
                os.replace(tmp, path)  # whole or not at all, also with ranks writing at once
            except BaseException:
                os.unlink(tmp)
                raise
        except Exception as e:
            self.warnings.append(f"could not keep the table of graph {key}: {type(e).__name__}: {e}")

    def _recorded_elsewhere(self, key: str) -> tuple[dict[str, Any], str | None, str | None, str] | None:
        """``(row, root, root_class, where)`` of a graph an earlier recorder of this process
        (``"process"``) or an earlier process (``"cache_dir"``) compiled, else ``None``."""
        with CompiledGraphRecorder._lock:
            graph = CompiledGraphRecorder._earlier_graphs.get(key)
            if graph is not None and graph.get("nodes_source") == "post_grad_pass":
                compile_ = next(
                    (
                        c
                        for c in CompiledGraphRecorder._earlier_compiles
                        if c["key"] == key and c["root"] is not None
                    ),
                    {},
                )
                entry = json.loads(json.dumps(graph, default=str))
                entry["compile_ids"] = []
                return entry, compile_.get("root"), compile_.get("root_class"), "process"
        if not self.persist:
            return None
        try:
            path = self._persist_path(key)
            if path is None or not os.path.exists(path):
                return None
            with open(path, encoding="utf-8") as f:
                document = json.load(f)
            entry = document["graph"]
            if document.get("format") != _PERSIST_FORMAT or entry.get("table_key") != key:
                return None
            entry["compile_ids"] = []
            return entry, document.get("root"), document.get("root_class"), "cache_dir"
        except Exception as e:  # a damaged file: as if there were none
            self.warnings.append(f"could not read the kept table of graph {key}: {type(e).__name__}: {e}")
            return None

    # -- building -------------------------------------------------------------------------------

    def _build_entry(
        self,
        table_key: str,
        key: str | None,
        direction: str,
        graph_id: Any,
        source: str,
        pending: _PendingGraph | None,
        bindings: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        kernels, calls = parse_wrapper_source(source)
        for index, site in enumerate(calls):
            site["index"] = index
        used: dict[str, dict[str, Any]] = {}
        inputs: list[dict[str, Any]] = []
        outputs: dict[str, Any] = {}
        if pending is not None:
            nodes = {n.name: n for n in pending.graph.nodes}
            paths = self._paths(pending)
            used = _assign_modules(calls, nodes, _provenance_map(), pending.provenance_lengths, paths)
            for spelling in dict.fromkeys(paths.unresolved):
                self.warnings.append(
                    f"graph {table_key}: the module path {spelling!r} could not be resolved to a"
                    " module of the model; its nodes keep it as written"
                )
            if direction != "backward":
                outputs = _module_outputs(pending.graph, paths, bindings or {})
            # binds symbolic sizes ("s77") to a run's concrete inputs
            inputs = [
                {"name": n.name, "val": _describe_val(n.meta.get("val"))}
                for n in pending.graph.nodes
                if n.op == "placeholder"
            ]
        else:
            for site in calls:
                site["nodes"] = []
                site["module"] = site["module_from"] = None
        prefixes = sorted(
            {m.group(1) for k in kernels.values() if k["event"] for m in [_PREFIX_RE.match(k["event"])] if m}
        )
        return {
            "key": key,
            "table_key": table_key,
            "direction": direction,
            "graph_id": graph_id,
            "event_prefixes": prefixes,
            "compile_ids": [],
            "wrapper": "python" if "def call(" in source else ("cpp" if source else "none"),
            "nodes_source": "post_grad_pass" if pending is not None else "none",
            "inputs": inputs,
            "calls": calls,
            "nodes": used,
            "module_outputs": outputs,
        }

    def _modules_by_id(self) -> dict[int, tuple[str, str]]:
        """id of each module of ``self.model`` (and of its compile wrappers) -> (name, class)."""
        if self._module_names is None:  # once per recorder: the model's modules do not change
            self._module_names = {}
            if self.model is not None:
                for name, module, wrapper in named_model_modules(self.model):
                    entry = (name, type(module).__name__)
                    self._module_names.setdefault(id(module), entry)
                    self._module_names.setdefault(id(wrapper), entry)
        return self._module_names

    def _classes_by_name(self) -> dict[str, str]:
        return dict(self._modules_by_id().values())

    def _paths(self, pending: _PendingGraph) -> ModulePaths:
        """The module paths of a post-grad graph's stack entries (once per graph)."""
        if pending.paths is None:
            entries = [
                (key, source)
                for node in pending.graph.nodes
                for key, source, _ in _module_stack(node, replaced=True)
            ]
            names = {ident: name for ident, (name, _) in self._modules_by_id().items()}
            pending.paths = ModulePaths(entries, names)
        return pending.paths

    def _root_module(self, pending: _PendingGraph) -> tuple[str | None, str | None]:
        """``(qualified name, class)`` in ``self.model`` of the module the compiled frame ran on
        (:attr:`ModulePaths.root`); ``(None, None)`` without a model, or for a frame that is not
        a module of the model or a graph without module stacks."""
        root = self._paths(pending).root
        return root, self._classes_by_name().get(root) if root is not None else None

    def module_outputs(self) -> dict[str, tuple[None, Any]]:
        """Qualified name in the model -> ``(None, output)``: the outputs of the modules inside
        compiled code, from the forward and inference graphs' ``module_outputs`` under the
        module their frame ran on (the module table's ``(inputs, outputs)`` of a call, inputs
        not known)."""
        with self._mutex:
            roots = {c["key"]: c["root"] for c in self.compiles if c["root"] is not None}
            out: dict[str, tuple[None, Any]] = {}
            for key, graph in self.graphs.items():
                root = roots.get(key)
                if root is None:
                    continue
                for module, value in (graph.get("module_outputs") or {}).items():
                    name = f"{root}.{module}" if root and module else root or module
                    out.setdefault(name, (None, value))
        return out

    # -- output ---------------------------------------------------------------------------------

    def table(self, earlier: Collection[str] = ()) -> dict[str, Any]:
        """The table as a JSON-able document (format ``traceprof.compiled``, version 1).

        ``earlier``: class names; the graphs that earlier recorders of this process recorded for
        a compiled frame whose root module has one of these classes (``compiles[i]
        ["root_class"]``) are included too, with their compiles, each marked
        ``"earlier_session": true``.
        """
        import torch._functorch.config as functorch_config
        import torch._inductor.config as inductor_config

        graphs: dict[str, Any] = {}
        compiles: list[dict[str, Any]] = []
        if earlier:
            classes = set(earlier)
            with CompiledGraphRecorder._lock:
                wanted = {
                    c["key"]
                    for c in CompiledGraphRecorder._earlier_compiles
                    if c.get("root_class") in classes
                }
                for key, graph in CompiledGraphRecorder._earlier_graphs.items():
                    if key in wanted and key not in self.graphs:
                        graphs[key] = {**graph, "earlier_session": True}
                compiles = [
                    {**c, "earlier_session": True}
                    for c in CompiledGraphRecorder._earlier_compiles
                    if c["key"] in graphs
                ]
        with self._mutex:
            graphs.update(self.graphs)
            compiles.extend(self.compiles)
            graphs, omitted = _strict_graphs(graphs)
            compiles = _strict(compiles)
            warnings = list(self.warnings)
        return {
            "format": TABLE_FORMAT,
            "version": TABLE_VERSION,
            "torch_version": self._torch_version,
            "salt": self.salt,
            "config": {
                "fx_graph_cache": bool(inductor_config.fx_graph_cache),
                "autograd_cache": bool(getattr(functorch_config, "enable_autograd_cache", False)),
                "cpp_wrapper": bool(inductor_config.cpp_wrapper),
                "descriptive_names": str(inductor_config.cpp.descriptive_names),
                "kernel_profile": True,
            },
            "graphs": graphs,
            "compiles": compiles,
            "warnings": warnings,
            "omitted": omitted,
        }


def failure_table(reason: str, torch_version: str) -> dict[str, Any]:
    """A table without graphs that records why the real one could not be written."""
    return {
        "format": TABLE_FORMAT,
        "version": TABLE_VERSION,
        "torch_version": torch_version,
        "graphs": {},
        "compiles": [],
        "warnings": [reason],
        "omitted": [{"graph": None, "node": None, "reason": reason[:_MAX_TEXT]}],
    }


def _strict(value: Any) -> Any:
    """``value`` through a strict JSON round trip (no NaN or infinity; other objects as text)."""
    return json.loads(json.dumps(value, default=str, allow_nan=False))


def _strict_graphs(graphs: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Each graph through :func:`_strict`: a node that still cannot be written is left out of
    its graph alone, a graph that cannot be written without it is left out; ``(graphs,
    omitted)``, where each omission is ``{"graph", "node", "reason"}`` (``node`` ``None``: the
    whole graph), as the table records them (``docs/trace-conventions.md``)."""
    out: dict[str, Any] = {}
    omitted: list[dict[str, Any]] = []
    for key, graph in graphs.items():
        try:
            out[key] = _strict(graph)
            continue
        except Exception:  # find what cannot be written, below
            pass
        nodes = dict(graph.get("nodes") or {})
        for name, node in list(nodes.items()):
            try:
                _strict(node)
            except Exception as e:
                del nodes[name]
                omitted.append({"graph": str(key), "node": str(name), "reason": _reason(e)})
        try:
            out[key] = _strict({**graph, "nodes": nodes})
        except Exception as e:
            omitted.append({"graph": str(key), "node": None, "reason": _reason(e)})
    return out, omitted


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:_MAX_TEXT]


def _wrap_post_compile(recorder: CompiledGraphRecorder, original: Any) -> Any:
    def post_compile(graph: Any, example_inputs: Any, constants: Any, graph_kwargs: Any) -> Any:
        result = original(graph, example_inputs, constants, graph_kwargs)
        if recorder._active_flag:
            try:
                with recorder._mutex:
                    recorder._on_compiled(graph, example_inputs, graph_kwargs)
            except Exception as e:  # recording must never break a compile
                recorder.warnings.append(f"recording a compiled graph failed: {type(e).__name__}: {e}")
        return result

    post_compile.__wrapped__ = original  # type: ignore[attr-defined]
    return post_compile


def _wrap_proxy_call(original: Any) -> Any:
    """``make_fx``'s ``proxy_call`` that, when an op is traced as its decomposition, keeps the
    op's arguments (described) on the node of its first output: ``meta["traceprof_original"]``
    (the post-grad node keeps it; ``original_inputs`` of the table). Only for the outermost
    decomposed op (the one ``meta["original_aten"]`` names); never fails a trace."""

    import torch.fx.experimental.proxy_tensor as proxy_tensor

    outermost = getattr(proxy_tensor, "ORIGINAL_ATEN", None)

    def proxy_call(mode: Any, func: Any, pre_dispatch: Any, args: Any, kwargs: Any) -> Any:
        # the op that original_aten names (set just before): not one inside its decomposition
        inner = outermost is None or outermost.get() is not func
        out = original(mode, func, pre_dispatch, args, kwargs)
        if not inner:
            try:
                _tag_original(mode, func, args, out)
            except Exception:  # only a description is lost
                pass
        return out

    proxy_call.__wrapped__ = original  # type: ignore[attr-defined]
    return proxy_call


def _tag_original(mode: Any, func: Any, args: Any, out: Any) -> None:
    from torch import Tensor
    from torch.fx.experimental.proxy_tensor import get_proxy_slot

    first = out[0] if isinstance(out, (tuple, list)) and out else out
    if not isinstance(first, Tensor):
        return
    proxy = getattr(get_proxy_slot(first, mode.tracer, None), "proxy", None)
    node = getattr(proxy, "node", None)
    # a node of another op (``to`` returning its input) keeps the first op's description
    if node is not None and node.target is not func and "traceprof_original" not in node.meta:
        node.meta["traceprof_original"] = (_op_name(func), [_describe_val(a) for a in args])


def _wrap_replace_with_graph(original: Any) -> Any:
    """Inductor's ``ReplacementPatternEntry.replace_with_graph(match, graph, replacement, args,
    ...)`` (a static method) that tags every node it creates without a module stack of its own
    with the stack of the heaviest node of ``match.nodes`` that has one: ``meta[_REPLACED_KEY]``
    (``module_from: "replaced"``). Runs only when a pattern replaces nodes; never fails one."""

    def replace_with_graph(*args: Any, **kwargs: Any) -> Any:
        added = original(*args, **kwargs)
        try:
            match = args[0] if args else kwargs.get("match")
            _tag_replaced(getattr(match, "nodes", None) or (), added or ())
        except Exception:  # only a module is lost: the node keeps the inputs' rule
            pass
        return added

    replace_with_graph.__wrapped__ = original  # type: ignore[attr-defined]
    return replace_with_graph


def _op_weight(target: Any) -> int:
    """1 for a matmul, convolution or attention op, 0 for any other (pointwise, views)."""
    parts = _op_name(target).split(".")
    base = parts[1] if len(parts) >= 2 and parts[0] in _OP_NAMESPACES else parts[0]
    return 1 if _HEAVY_OP_RE.fullmatch(base) else 0


def _tag_replaced(matched: Iterable[Any], added: Iterable[Any]) -> None:
    """Give each node of ``added`` without a module stack the stack of the heaviest node of
    ``matched`` that has one (by :func:`_op_weight`; ties: the first)."""
    best: dict[str, Any] | None = None
    best_weight = -1
    for node in matched:
        meta = getattr(node, "meta", None) or {}
        stack = meta.get("fwd_nn_module_stack") or meta.get("nn_module_stack") or meta.get(_REPLACED_KEY)
        weight = _op_weight(getattr(node, "target", None))
        if stack and weight > best_weight:
            best, best_weight = stack, weight
    if best is None:
        return
    for node in added:
        meta = getattr(node, "meta", None)
        if meta is None or getattr(node, "op", None) != "call_function":
            continue
        if not (meta.get("fwd_nn_module_stack") or meta.get("nn_module_stack") or meta.get(_REPLACED_KEY)):
            meta[_REPLACED_KEY] = dict(best)


def iter_call_sites(table: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(table_key, call_site)`` for every call site of every graph of a table document."""
    for key, graph in table.get("graphs", {}).items():
        for site in graph.get("calls", []):
            yield key, site


# -- eager scopes around modules compiled in place ---------------------------------------------------


class compiled_module_scopes:
    """Give every call of a module compiled in place (``module.compile()``) an eager scope.

    ``Module.compile()`` makes ``Module.__call__`` run ``module._compiled_call_impl``, a compiled
    ``_call_impl``: the module's hooks then run inside compiled code, so hook-based scopes never
    open for it. And Dynamo compiles one graph for all blocks of one class (module paths in the
    graph are relative to ``L['self']``), so which block ran is known only at run time. While
    active, this wraps ``_compiled_call_impl`` of each such module of ``model`` so that its calls
    run inside a scope ``[traceprof:1]<Class>: <qualified.name>`` while a profiler is on. Inside
    an outer compiled region the wrapper calls straight through. Restored on exit.

    For traces taken with a bare ``torch.profiler``; the capture session does this itself.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self._patched: list[tuple[Any, Any, Any]] = []

    def __enter__(self) -> compiled_module_scopes:
        import torch

        is_compiling = torch.compiler.is_compiling
        record = getattr(torch._C._profiler, "_RecordFunctionFast", None) or torch.profiler.record_function
        for name, module, _ in named_model_modules(self.model):
            impl = compiled_in_place(module)
            if impl is None:
                continue
            scope = traceprof_scope_name(type(module).__name__, name)
            wrapped = _scoped_call(impl, scope, is_compiling, record)
            module.__dict__["_compiled_call_impl"] = wrapped
            self._patched.append((module, impl, wrapped))
        return self

    def __exit__(self, *exc: object) -> None:
        while self._patched:
            module, impl, wrapped = self._patched.pop()
            if module.__dict__.get("_compiled_call_impl") is wrapped:
                module.__dict__["_compiled_call_impl"] = impl


def _scoped_call(impl: Any, scope: str, is_compiling: Callable[[], bool], record: Any) -> Any:
    import torch.autograd.profiler as autograd_profiler

    def scoped(*args: Any, **kwargs: Any) -> Any:
        if is_compiling() or not autograd_profiler._is_profiler_enabled:
            return impl(*args, **kwargs)
        with record(scope):
            return impl(*args, **kwargs)

    scoped.__wrapped__ = impl  # type: ignore[attr-defined]
    return scoped

"""Post-grad FX nodes described for the compiled-kernel table: each node's op, its arguments
and output as strict JSON (:func:`encode_value`), and the module it works for (its module stack,
resolved by ``traceprof.capture.module_paths``; for nodes without one, the rules of
``docs/trace-conventions.md``); each call site's nodes and module (:func:`assign_modules`);
the modules' outputs (:func:`module_outputs`).

This module imports no torch: it reads the objects it is given.
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from typing import Any

from traceprof.capture.module_paths import ModulePaths
from traceprof.trace.model import CompiledCall, CompiledNode
from traceprof.trace.module_names import common_module
from traceprof.trace.schema import COMPILED_FROM_FORWARD_STACK, COMPILED_OWN_STACK

#: nesting depth past which a described value is written as ``null``
_MAX_DEPTH = 6
#: characters of a value written as text, past which it is cut
_MAX_TEXT = 200
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: ``node.meta`` key of the module stack a pattern replacement gave a node it created
REPLACED_KEY = "traceprof_replaced"
_REPLACED_KEY = REPLACED_KEY

__all__ = [
    "REPLACED_KEY",
    "assign_modules",
    "bindings",
    "describe_val",
    "encode_value",
    "module_outputs",
    "module_stack",
    "op_name",
]


def describe_val(val: Any, depth: int = 0) -> Any:
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


def op_name(target: Any) -> str:
    if type(target).__name__ in ("OpOverload", "OpOverloadPacket", "HigherOrderOperator"):
        return str(target)  # "aten.mm.default"
    name = getattr(target, "__name__", None)
    return str(name) if name else str(target)


def module_stack(node: Any, replaced: bool = False) -> list[tuple[str, str, str]]:
    """``[(key, source_name, class_name), ...]``, outermost first; backward nodes use the forward's.

    ``replaced``: without a stack of its own, the one a pattern replacement gave the node
    (:func:`_wrap_replace_with_graph`).
    """
    stack = node.meta.get(COMPILED_FROM_FORWARD_STACK) or node.meta.get(COMPILED_OWN_STACK) or {}
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


def _describe_node(node: Any, paths: ModulePaths) -> CompiledNode:
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
    stack = module_stack(node)
    module_from: str | None = None
    derived: tuple[str, str | None, str | None] | None = None
    if stack:
        module_from = (
            COMPILED_FROM_FORWARD_STACK if COMPILED_FROM_FORWARD_STACK in node.meta else COMPILED_OWN_STACK
        )
    elif node.meta.get(_REPLACED_KEY):
        stack = module_stack(node, replaced=True)
        module_from = "replaced" if stack else None
    elif (
        op_name(node.target) == "aten.copy_.default" and len(node.args) >= 2 and hasattr(node.args[1], "meta")
    ):
        stack = module_stack(node.args[1])
        module_from = "copy_source" if stack else None
    elif _pattern_made(node):
        derived = _module_of_inputs(node, {}, paths)
        module_from = "inputs" if derived is not None else None
    op = op_name(node.target)
    fields: dict[str, Any] = {}
    if node.kwargs:
        fields["kwargs"] = {str(k): _describe_arg(v) for k, v in node.kwargs.items()}
    if stack:
        key, source, cls_name = stack[-1]
        fields["root_local"], fields["module"] = paths.resolve(key, source)
        fields["module_class"] = cls_name
    elif derived is not None:
        fields["module"], fields["module_class"], fields["root_local"] = derived
    original = node.meta.get("original_aten")
    if original is not None and op_name(original) != op and "seq_nr" in node.meta:
        # one of the nodes an op was decomposed into: the group is that op's call
        fields["original_aten"] = op_name(original)
        fields["original_group"] = f"{node.meta['seq_nr']}:{fields['original_aten']}"
        described = node.meta.get("traceprof_original")
        if isinstance(described, tuple) and len(described) == 2 and described[0] == fields["original_aten"]:
            fields["original_inputs"] = described[1]  # on the node of the op's first output
    return CompiledNode(
        op=op,
        inputs=tuple(_describe_arg(a) for a in node.args),
        output=describe_val(node.meta.get("val")),
        module_from=module_from,
        **fields,
    )


def bindings(graph: Any, example_inputs: Any) -> dict[str, int]:
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


def module_outputs(graph: Any, paths: ModulePaths, bindings: dict[str, int]) -> dict[str, Any]:
    """Relative module path -> its output's value described: the value of the last node, in
    graph order, computed inside the module (a node whose module stack holds it) and used by a
    node outside it; without one, the module's last node. The module's hooks do not run inside
    compiled code, so this stands for the output they would record (the module table's
    ``outputs``: torchinfo's mult-adds and pass size need it)."""
    inside: dict[Any, set[str]] = {}
    for node in graph.nodes:
        if node.op == "call_function":
            inside[node] = {paths.resolve(key, source)[1] for key, source, _ in module_stack(node)}
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
        and not node.meta.get(COMPILED_OWN_STACK)
        and not node.meta.get(COMPILED_FROM_FORWARD_STACK)
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
        stack = module_stack(arg, replaced=True)
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
    module = common_module(f[0] for f in found)
    class_name = next((f[1] for f in found if f[0] == module), None)
    roots = {f[2] for f in found}
    memo[node.name] = result = (module, class_name, roots.pop() if len(roots) == 1 else None)
    return result


def assign_modules(
    calls: list[dict[str, Any]],
    nodes: dict[str, Any],
    provenance: dict[str, list[str]],
    offsets: dict[str, int],
    paths: ModulePaths,
) -> tuple[list[CompiledCall], dict[str, CompiledNode]]:
    """Each call site (of :func:`parse_wrapper_source`) with its ``nodes``, ``module``,
    ``modules``, ``module_from`` (and ``primary_node``) from the provenance map, and the described
    nodes by name."""
    used: dict[str, CompiledNode] = {}
    sites: list[dict[str, Any]] = []
    for call in calls:
        site = {**call, "nodes": [], "module": None, "module_from": None}
        sites.append(site)
        if call["handle"] is not None:
            handle_key = f"{call['kernel']}:{call['handle']}"
            # handles restart in every provenance context: keep only what this graph added
            site["nodes"] = list(provenance.get(handle_key, [])[offsets.get(handle_key, 0) :])
        modules, known = [], []
        for name in site["nodes"]:
            node = nodes.get(name)
            if node is None:
                continue
            if name not in used:
                used[name] = _describe_node(node, paths)
            modules.append(used[name].module)
            if used[name].module_from is not None:
                known.append(used[name].module)
        if not modules:
            continue
        site["modules"] = dict(Counter(modules))
        # nodes without a module stack (gradient sums, pattern-made nodes) do not pull a fused
        # kernel up to the root
        site["module"] = common_module(known) if known else ""
        site["module_from"] = "nodes"
        if site["kind"] in ("extern", "fallback") and site["event"]:
            # the node the extern call computes (its other nodes are views feeding it)
            primary = [n for n in site["nodes"] if n in used and _event_of_op(used[n].op) == site["event"]]
            if len(primary) == 1:
                site["primary_node"] = primary[0]
                site["module"] = used[primary[0]].module
                site["module_from"] = "primary_node"
    # call sites Inductor gave no provenance handle (the scatter_reduce_ of max_pool2d's backward,
    # emitted while lowering another node): the module of the call site before (or after) them
    assigned = ("nodes", "primary_node")
    for i, site in enumerate(sites):
        if site["module"] is not None:
            continue
        before = next((c for c in reversed(sites[:i]) if c["module_from"] in assigned), None)
        after = next((c for c in sites[i + 1 :] if c["module_from"] in assigned), None)
        near = before if before is not None else after
        if near is not None:
            site["module"] = near["module"]
            site["module_from"] = "previous_call" if near is before else "next_call"
    return [CompiledCall(**site) for site in sites], used

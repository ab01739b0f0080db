"""The wrappers the recorder puts around Inductor while it is active, each of which only
records: ``CompiledFxGraph.post_compile`` (every compiled or cached graph), ``make_fx``'s
``proxy_call`` (a decomposed op's arguments kept on the node of its first output) and
``ReplacementPatternEntry.replace_with_graph`` (nodes a pattern replacement creates take the
module of the heaviest node they replace). Nothing here can fail a compile.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from traceprof.capture.graph_nodes import REPLACED_KEY, describe_val, op_name
from traceprof.capture.wrapper_source import OP_NAMESPACES
from traceprof.trace.schema import COMPILED_FROM_FORWARD_STACK, COMPILED_OWN_STACK

__all__ = ["tag_replaced", "wrap_post_compile", "wrap_proxy_call", "wrap_replace_with_graph"]

#: op names (without namespace and overload) of matmul, convolution and attention ops: a
#: replacement's nodes take the module of the matched node of this family over pointwise ones
_HEAVY_OP_RE = re.compile(r"\w*(mm|matmul|linear|conv\w*|attention\w*|scaled_dot_product\w*)")


def wrap_post_compile(recorder: Any, original: Any) -> Any:
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


def wrap_proxy_call(original: Any) -> Any:
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
        node.meta["traceprof_original"] = (op_name(func), [describe_val(a) for a in args])


def wrap_replace_with_graph(original: Any) -> Any:
    """Inductor's ``ReplacementPatternEntry.replace_with_graph(match, graph, replacement, args,
    ...)`` (a static method) that tags every node it creates without a module stack of its own
    with the stack of the heaviest node of ``match.nodes`` that has one: ``meta[REPLACED_KEY]``
    (``module_from: "replaced"``). Runs only when a pattern replaces nodes; never fails one."""

    def replace_with_graph(*args: Any, **kwargs: Any) -> Any:
        added = original(*args, **kwargs)
        try:
            match = args[0] if args else kwargs.get("match")
            tag_replaced(getattr(match, "nodes", None) or (), added or ())
        except Exception:  # only a module is lost: the node keeps the inputs' rule
            pass
        return added

    replace_with_graph.__wrapped__ = original  # type: ignore[attr-defined]
    return replace_with_graph


def _op_weight(target: Any) -> int:
    """1 for a matmul, convolution or attention op, 0 for any other (pointwise, views)."""
    parts = op_name(target).split(".")
    base = parts[1] if len(parts) >= 2 and parts[0] in OP_NAMESPACES else parts[0]
    return 1 if _HEAVY_OP_RE.fullmatch(base) else 0


def _stack_of(meta: dict[str, Any]) -> Any:
    """A node's module stack: the forward's, its own, else one a replacement gave it."""
    return meta.get(COMPILED_FROM_FORWARD_STACK) or meta.get(COMPILED_OWN_STACK) or meta.get(REPLACED_KEY)


def tag_replaced(matched: Iterable[Any], added: Iterable[Any]) -> None:
    """Give each node of ``added`` without a module stack the stack of the heaviest node of
    ``matched`` that has one (by :func:`_op_weight`; ties: the first)."""
    best: dict[str, Any] | None = None
    best_weight = -1
    for node in matched:
        meta = getattr(node, "meta", None) or {}
        stack = _stack_of(meta)
        weight = _op_weight(getattr(node, "target", None))
        if stack and weight > best_weight:
            best, best_weight = stack, weight
    if best is None:
        return
    for node in added:
        meta = getattr(node, "meta", None)
        if meta is None or getattr(node, "op", None) != "call_function":
            continue
        if not _stack_of(meta):
            meta[REPLACED_KEY] = dict(best)

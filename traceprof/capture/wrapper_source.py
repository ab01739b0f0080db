"""The call sites of an Inductor graph's Python wrapper: which kernel each call of its ``call``
function runs, and the name of the profiler event it leaves (``docs/trace-conventions.md``).

Generated C++ kernels are defined with ``async_compile.cpp_pybinding`` (their event is the
``RAIIAtenRecordFunctionHandle`` string Inductor writes with ``cpp.enable_kernel_profile``,
``graph_<n>_<kernel>``), Triton kernels with ``async_compile.triton`` (called as
``<kernel>.run(..., stream=stream0)``: their event is a ``cpu_op`` named as the kernel); extern
kernels (``extern_kernels.addmm``) and fallbacks (``torch.ops.aten.<op>.<overload>``) leave the
dispatcher's ``aten::<op>`` event. A ``# [Provenance debug handles] <kernel>:<n>`` comment above a
call gives its provenance handle.

This module imports torch only to resolve extern kernels' names.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["expected_event_name", "parse_wrapper_source"]

_KERNEL_DEF_RE = re.compile(r"^(?P<name>\w+) = async_compile\.(?P<kind>cpp_pybinding|cpp|triton)\(", re.M)
_RECORD_RE = re.compile(r'RAIIAtenRecordFunctionHandle\s+\w+\("(?P<event>[^"]+)"')
_TRITON_NAME_RE = re.compile(r"""async_compile\.triton\(\s*['"](?P<name>\w+)['"]""")
_HANDLE_RE = re.compile(r"#\s*\[Provenance debug handles\]\s*(?P<name>\S+):(?P<handle>\d+)\s*$")
_CALL_RE = re.compile(r"^(?:[\w\s,\[\]]+=\s*)?(?P<callee>[A-Za-z_][\w.]*)\(")
_INPLACE_RE = re.compile(r"^(?P<obj>buf\w*|primals_\w+|arg\w+)\.(?P<method>\w+_)\(")
#: dispatcher namespaces of ops a wrapper calls directly
OP_NAMESPACES = ("aten", "prims", "quantized", "mkldnn", "onednn")


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
    if parts[0] in OP_NAMESPACES and len(parts) >= 2:
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
        and (callee.startswith("torch.ops.") or callee.split(".")[0] in OP_NAMESPACES)
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

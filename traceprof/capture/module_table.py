"""The module table that `traceprof.capture` embeds into a trace (format version 1).

The table is described in ``docs/trace-conventions.md``: one row per module of
``model.named_modules()`` with parameter and buffer counts, ``extra_repr`` and the input and
output structure of the module's first call in a profiled step. It is JSON, encoded as base64
and added to the trace's top level under the key ``"traceprof"`` with
``prof.add_metadata("traceprof", payload)`` (base64 because Kineto rewrites backslashes in
metadata values, which would corrupt JSON strings).

Only ``describe_modules`` and ``describe_value`` touch torch objects, and only through the
objects they are given: this file imports no torch at module level. ``encode_table`` and
``decode_table`` are plain Python.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Any

import msgspec

from traceprof.trace.model import RawModuleRow, RawModuleTable
from traceprof.trace.schema import MODULE_TABLE_FORMAT as TABLE_FORMAT
from traceprof.trace.schema import MODULE_TABLE_VERSION as TABLE_VERSION

#: Nesting depth past which a value inside inputs/outputs is written as ``null``.
MAX_VALUE_DEPTH = 16


def describe_value(value: Any, depth: int = 0) -> Any:
    """Shape/dtype structure of a module input or output, as JSON-able data.

    A tensor is ``{"shape": [...], "dtype": "float32"}``, a tuple or list a list, a dict an
    object with string keys, anything else ``None``.
    """
    if depth > MAX_VALUE_DEPTH:
        return None
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None and _is_tensor(value):
        try:
            dims = [int(d) for d in shape]
        except (TypeError, ValueError, RuntimeError):  # nested/jagged or symbolic sizes
            return None
        return {"shape": dims, "dtype": str(dtype).removeprefix("torch.")}
    if isinstance(value, (tuple, list)):
        return [describe_value(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): describe_value(v, depth + 1) for k, v in value.items()}
    return None


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def describe_call(args: tuple, kwargs: dict | None, output: Any) -> tuple[list, Any]:
    """``(inputs, outputs)`` of one module call, in the table's format."""
    inputs = [describe_value(a, 1) for a in args]
    if kwargs:
        inputs.append({"kwargs": {str(k): describe_value(v, 2) for k, v in kwargs.items()}})
    return inputs, describe_value(output)


def _numel(tensors: Iterable[Any]) -> int:
    return sum(int(t.numel()) for t in tensors)


def describe_modules(named_modules: Iterable[tuple[str, Any]]) -> list[RawModuleRow]:
    """Static rows of the table: everything except inputs/outputs.

    ``named_modules`` is ``model.named_modules()`` of the profiled model (shared modules appear
    once, under their first name). ``params`` counts the parameters a module owns itself
    (``recurse=False``); the ``*_total`` fields count the module and its children with shared or
    tied tensors counted once (``Module.parameters()`` removes duplicates by identity).

    Added later (readers treat them as optional): ``param_bytes`` / ``param_bytes_total`` (the
    same counts in bytes, ``element_size() * numel()``), ``param_counts`` (own parameters by
    name: what torchinfo's mult-adds estimate needs), ``leaf`` (no child modules),
    ``weight_shape`` (shape of a ``weight`` parameter), ``kernel_size`` (a ``kernel_size``
    attribute, as torchinfo's "Kernel Shape" shows it) and ``tied`` (own parameters that are a
    module's met earlier, by name: the qualified name of that first one; absent when none).
    """
    rows = []
    owner: dict[int, str] = {}  # id of a parameter -> its first qualified name
    for name, module in named_modules:
        params = list(module.parameters())
        trainable = _numel(p for p in params if p.requires_grad)
        total = _numel(params)
        try:
            extra = str(module.extra_repr())
        except Exception:  # a user extra_repr that fails must not break profiling
            extra = ""
        tied = {}
        for pname, p in module.named_parameters(recurse=False):
            qualified = f"{name}.{pname}" if name else str(pname)
            if id(p) in owner:
                tied[str(pname)] = owner[id(p)]
            else:
                owner[id(p)] = qualified
        weight = getattr(module, "_parameters", {}).get("weight")
        rows.append(
            RawModuleRow(
                name=name,
                class_name=type(module).__name__,
                params=_numel(module.parameters(recurse=False)),
                params_total=total,
                trainable_total=trainable,
                frozen_total=total - trainable,
                buffers_total=_numel(module.buffers()),
                extra_repr=extra,
                param_bytes=_nbytes(module.parameters(recurse=False)),
                param_bytes_total=_nbytes(params),
                param_counts={str(n): int(p.numel()) for n, p in module.named_parameters(recurse=False)},
                leaf=not any(True for _ in module.children()),
                tied=tied or None,  # own parameters that are another module's (tied weights)
                weight_shape=(
                    [int(d) for d in weight.shape]
                    if weight is not None and hasattr(weight, "shape")
                    else None
                ),
                kernel_size=_kernel_size(module),
            )
        )
    return rows


def _nbytes(tensors: Iterable[Any]) -> int:
    return sum(int(t.numel()) * int(t.element_size()) for t in tensors)


def _kernel_size(module: Any) -> int | list[int] | None:
    k = getattr(module, "kernel_size", None)
    try:
        if isinstance(k, int) and not isinstance(k, bool):
            return int(k)
        if isinstance(k, (tuple, list)):
            return [int(d) for d in k]
    except (TypeError, ValueError):
        pass
    return None


def build_table(
    rows: list[RawModuleRow],
    calls: dict[str, tuple[list, Any]],
    *,
    torch_version: str,
    rank: int,
    world_size: int,
) -> dict[str, Any]:
    """The table document: static ``rows`` plus ``calls`` (qualified name -> (inputs, outputs))."""
    modules = []
    for row in rows:
        call = calls.get(row.name)
        if call is not None:
            row = msgspec.structs.replace(row, inputs=call[0], outputs=call[1])
        modules.append(row)
    table = RawModuleTable(
        format=TABLE_FORMAT,
        version=TABLE_VERSION,
        torch_version=torch_version,
        rank=rank,
        world_size=world_size,
        modules=modules,
    )
    return msgspec.to_builtins(table)


def encode_table(table: dict[str, Any]) -> str:
    """Base64 of the UTF-8 JSON document: holds neither ``"`` nor ``\\``."""
    text = json.dumps(table, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def decode_table(payload: str) -> dict[str, Any]:
    """Inverse of :func:`encode_table` (the value of the trace's top-level ``"traceprof"`` key)."""
    return json.loads(base64.b64decode(payload.encode("ascii")).decode("utf-8"))

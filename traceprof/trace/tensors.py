"""Tensors as traceprof's embedded tables describe them, and the size of their elements.

The module table (``ModuleInfo.inputs``/``outputs``) and the compiled-kernel table
(``CompiledNode.inputs``) write a tensor as a :class:`TensorSpec`, ``{"shape": [...], "dtype":
"float32"}``: its dims and torch's name of its element type; tuples and lists of values are
lists, dicts are dicts (docs/trace-conventions.md). The FLOP formulas read element types as
canonical dtypes (``fp32``, from the ``Input type`` spellings of ``schema.DTYPE_SPELLINGS``);
:data:`ITEMSIZE` gives the bytes of an element of each, and :func:`element_size` of a torch
name.
"""

from __future__ import annotations

from typing import TypedDict, TypeGuard

from traceprof.trace import schema


class TensorSpec(TypedDict):
    """A tensor in an embedded table: its dims and torch's name of its element type
    (``torch.float32`` -> ``"float32"``). A compiled-kernel table writes a symbolic size as its
    expression (``"s0"``): such a tensor's size is not known, and :func:`is_tensor` says no."""

    shape: list[int]
    dtype: str


#: bytes per element of each canonical dtype
ITEMSIZE: dict[str, float] = {
    "fp64": 8,
    "fp32": 4,
    "fp16": 2,
    "bf16": 2,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_e8m0": 1,
    "fp4x2": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "bool": 1,
    "complex32": 4,
    "complex64": 8,
    "complex128": 16,
}

#: torch dtype names that ``schema.TORCH_DTYPE_SPELLINGS`` does not list: torch's other names
#: of its types, and the unsigned types the profiler has no spelling for
_TORCH_OTHER_NAMES = {
    "double": "fp64",
    "float": "fp32",
    "half": "fp16",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
}


def is_tensor(spec: object) -> TypeGuard[TensorSpec]:
    """Whether ``spec`` is a tensor with concrete dims (a symbolic size, ``"s0"``, or odd
    contents: not one)."""
    return (
        isinstance(spec, dict)
        and "dtype" in spec
        and isinstance(spec.get("shape"), list)
        and all(isinstance(d, int) and not isinstance(d, bool) for d in spec["shape"])
    )


def canonical_dtype(torch_name: str) -> str | None:
    """The canonical dtype of a torch dtype name (``"float32"`` -> ``"fp32"``); None when
    unknown."""
    spelling = schema.TORCH_DTYPE_SPELLINGS.get(torch_name)
    if spelling is None:
        return _TORCH_OTHER_NAMES.get(torch_name)
    return schema.DTYPE_SPELLINGS.get(spelling)


def element_size(torch_name: object) -> int:
    """Bytes of one element of a torch dtype name, as torchinfo counts them: every float8 type
    one byte, an unknown type 0."""
    text = str(torch_name or "")
    if text.startswith("float8"):
        return 1
    canonical = canonical_dtype(text)
    return int(ITEMSIZE[canonical]) if canonical is not None else 0

"""A compiled-kernel table node's arguments as an op event would record them (``Input Dims``,
``Input type``, ``Concrete Inputs``), and its cost through the FLOP registry: tensors with their
dims and dtypes as traces spell them, symbolic sizes (``"s77"``, ``"(s0 + 1)//2"``) bound to a
run's sizes and evaluated by a small parser that refuses anything but integer arithmetic within
:data:`MAX_SIZE` (never ``eval``)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from traceprof.analysis.op_costs import cost_of
from traceprof.flops import FAMILIES, Registry
from traceprof.flops.shapes import ArgumentError, OpArgs, OpCost
from traceprof.trace import schema
from traceprof.trace.model import CompiledGraph, CompiledNode


def node_cost(
    node: CompiledNode,
    registry: Registry,
    sizes: dict[str, int] | None = None,
    problems: Counter[str] | None = None,
) -> tuple[OpCost, int] | None:
    """The cost of one node's op and its family's code, through ``registry`` as an eager op
    event of the same op and arguments would be counted; None when it has none (no formula,
    arguments not understood, a symbolic size not bound in ``sizes``, a size past any
    tensor's: counted in ``problems["size"]``)."""
    name = schema.compiled_op_event_name(node.op)
    entry = registry.get(name) if name is not None else None
    if name is None or entry is None or entry.formula is None:
        return None
    try:
        args = op_args(name, node.inputs, sizes or {})
    except SizeOutOfRange:
        if problems is not None:
            problems["size"] += 1
        return None
    except ArgumentError:
        return None
    cost = cost_of(entry, args)
    return (cost, FAMILIES.index(entry.family)) if cost is not None else None


def op_args(name: str, inputs: Iterable[Any], sizes: dict[str, int]) -> OpArgs:
    """A node's arguments as an op event's ``Input Dims`` / ``Input type`` / ``Concrete
    Inputs`` would record them: tensors with their dims and dtype spelled as traces spell it,
    lists of tensors as tensor lists, numbers and flags as scalars, None and text as absent."""
    dims: list[Any] = []
    types: list[str] = []
    values: list[str] = []
    for value in inputs:
        d, t, v = _argument(value, sizes)
        dims.append(d)
        types.append(t)
        values.append(v)
    return OpArgs(name, dims, types, values)


def _argument(value: Any, sizes: dict[str, int]) -> tuple[Any, str, str]:
    if _is_tensor(value):
        dtype = str(value["dtype"])
        if len(value["shape"]) > MAX_DIMS:
            raise SizeOutOfRange(f"a tensor of {len(value['shape'])} dimensions")
        dims = [size_of(s, sizes) for s in value["shape"]]
        numel = 1
        for d in dims:
            numel *= d
            if numel > MAX_SIZE:
                raise SizeOutOfRange(f"a tensor of more than {MAX_SIZE} elements")
        return dims, schema.TORCH_DTYPE_SPELLINGS.get(dtype, f"c10::{dtype}"), ""
    if isinstance(value, dict) and "sym" in value:
        return [], schema.SCALAR_TYPE, str(size_of(value["sym"], sizes))
    if _is_encoded_number(value):  # {"float": "-inf"}, {"int": "<digits>"}: as a trace spells them
        return [], schema.SCALAR_TYPE, str(value.get("float", value.get("int")))
    if isinstance(value, bool):
        return [], schema.SCALAR_TYPE, schema.CONCRETE_TRUE if value else schema.CONCRETE_FALSE
    if isinstance(value, (int, float)):
        return [], schema.SCALAR_TYPE, str(value)
    if isinstance(value, (list, tuple)):
        if value and all(_is_tensor(v) for v in value):
            return [[size_of(s, sizes) for s in v["shape"]] for v in value], schema.TENSOR_LIST_TYPE, ""
        if all(
            isinstance(v, (int, float, bool, str))
            or (isinstance(v, dict) and "sym" in v)
            or _is_encoded_number(v)
            for v in value
        ):
            items = [_argument(v, sizes)[2] for v in value]
            return [], schema.SCALAR_LIST_TYPE, "[" + ", ".join(items) + "]"
    return [], "", ""


def _is_encoded_number(value: Any) -> bool:
    """A number the table spells as an object (docs/trace-conventions.md "Values"): a
    non-finite float, an int beyond 64 bits."""
    return isinstance(value, dict) and len(value) == 1 and ("float" in value or "int" in value)


def _is_tensor(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("shape"), list) and "dtype" in value


def is_symbolic(graph: CompiledGraph) -> bool:
    """Whether a graph's placeholders have symbolic sizes (compiled with dynamic shapes)."""
    for placeholder in graph.inputs:
        val = placeholder.val
        if isinstance(val, dict) and ("sym" in val or any(isinstance(d, str) for d in val.get("shape", ()))):
            return True
    return False


def bound_sizes(graph: CompiledGraph, dims: Any, concrete: Any) -> dict[str, int]:
    """Symbolic sizes bound by a run's inputs: a symbolic scalar placeholder takes its concrete
    value, a symbolic dim of a tensor placeholder the recorded dim."""
    sizes: dict[str, int] = {}
    dims = dims if isinstance(dims, list) else []
    concrete = concrete if isinstance(concrete, list) else []
    for i, placeholder in enumerate(graph.inputs):
        val = placeholder.val
        if not isinstance(val, dict):
            continue
        if isinstance(val.get("sym"), str) and i < len(concrete):
            try:
                sizes[val["sym"]] = int(concrete[i])
            except (TypeError, ValueError):
                pass
        shape = val.get("shape")
        if (
            isinstance(shape, list)
            and i < len(dims)
            and isinstance(dims[i], list)
            and len(dims[i]) == len(shape)
        ):
            for d, v in zip(shape, dims[i]):
                if isinstance(d, str) and _SYMBOL.fullmatch(d) and isinstance(v, int):
                    sizes[d] = v
    return sizes


_SYMBOL = re.compile(r"[A-Za-z_]\w*")
#: a size (or a tensor's elements) in the table past this is no tensor's (its bytes would not
#: fit any memory), nor is a tensor of more dimensions than MAX_DIMS (torch's limit is 64)
MAX_SIZE = 2**48
MAX_DIMS = 64
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(//|[-+*/%(),]))")


class SizeOutOfRange(ArgumentError):
    """A size in the compiled-kernel table beyond :data:`MAX_SIZE`."""


def size_of(value: Any, sizes: dict[str, int]) -> int:
    """A size: an int, or a symbolic size (``"s77"``, ``"2*s1"``, ``"(s0 + 1)//2"``,
    ``"Max(1, s0)"``) with its symbols bound in ``sizes``, evaluated by :class:`_Expression`
    (integers only, each step within :data:`MAX_SIZE`; anything else is refused)."""
    if isinstance(value, bool):
        raise ArgumentError(f"size {value!r}")
    if isinstance(value, int):
        out = value
    elif isinstance(value, str) and len(value) <= 200:
        out = _Expression(value, sizes).value()
    else:
        raise ArgumentError(f"size {str(value)[:40]!r}")
    if not 0 <= out <= MAX_SIZE:
        raise SizeOutOfRange(f"size {str(value)[:40]} out of range")
    return out


class _Expression:
    """A symbolic size's text parsed by recursive descent: ``+ - * // / %``, parentheses, unary
    minus, ``Max``/``Min`` of arguments and ``floor``/``ceiling`` of one; integers and bound
    symbols. Every intermediate value stays within :data:`MAX_SIZE` in magnitude, nesting
    within 32 levels: a hostile text (``9**9**9``) is refused, never evaluated."""

    _FUNCTIONS: ClassVar[dict[str, Callable[[list[int]], int]]] = {"Max": max, "Min": min}

    def __init__(self, text: str, sizes: dict[str, int]) -> None:
        self.text, self.sizes = text, sizes
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise ArgumentError(f"symbolic size {text!r} not understood")
            kind = "int" if m.group(1) else "name" if m.group(2) else "op"
            self.tokens.append((kind, m.group(1) or m.group(2) or m.group(3)))
            pos = m.end()
        self.at = 0
        self.depth = 0

    def value(self) -> int:
        out = self._sum()
        if self.at != len(self.tokens):
            raise ArgumentError(f"symbolic size {self.text!r} not understood")
        return out

    def _peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def _take(self, expected: str | None = None) -> tuple[str, str]:
        if self.at >= len(self.tokens) or (expected is not None and self.tokens[self.at][1] != expected):
            raise ArgumentError(f"symbolic size {self.text!r} not understood")
        self.at += 1
        return self.tokens[self.at - 1]

    @staticmethod
    def _checked(v: int) -> int:
        if abs(v) > MAX_SIZE:
            raise SizeOutOfRange(f"size out of range ({v:.3g})")
        return v

    def _sum(self) -> int:
        out = self._product()
        while self._peek() in ("+", "-"):
            op = self._take()[1]
            right = self._product()
            out = self._checked(out + right if op == "+" else out - right)
        return out

    def _product(self) -> int:
        out = self._unary()
        while self._peek() in ("*", "//", "/", "%"):
            op = self._take()[1]
            right = self._unary()
            if op == "*":
                out = self._checked(out * right)
            elif right == 0:
                raise ArgumentError(f"symbolic size {self.text!r} divides by 0")
            else:  # sizes are integers: / is floor division, as in torch's size expressions
                out = out % right if op == "%" else out // right
        return out

    def _unary(self) -> int:
        if self._peek() == "-":
            self._take()
            return -self._unary()
        return self._atom()

    def _atom(self) -> int:
        self.depth += 1
        if self.depth > 32:
            raise ArgumentError(f"symbolic size {self.text[:40]!r} nested too deeply")
        try:
            kind, token = self._take()
            if kind == "int":
                return self._checked(int(token)) if len(token) <= 16 else self._checked(MAX_SIZE + 1)
            if token == "(":
                out = self._sum()
                self._take(")")
                return out
            if kind == "name" and self._peek() == "(" and token in ("Max", "Min", "floor", "ceiling"):
                self._take("(")
                args = [self._sum()]
                while self._peek() == ",":
                    self._take()
                    args.append(self._sum())
                self._take(")")
                if token in self._FUNCTIONS:
                    return self._FUNCTIONS[token](args)
                if len(args) != 1:
                    raise ArgumentError(f"symbolic size {self.text!r} not understood")
                return args[0]  # integer sizes: floor and ceiling of an int are itself
            if kind == "name" and token in self.sizes:
                return self._checked(int(self.sizes[token]))
            raise ArgumentError(f"symbolic size {self.text!r} not bound")
        finally:
            self.depth -= 1

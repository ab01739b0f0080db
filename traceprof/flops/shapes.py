"""The arguments of one op call, decoded from the raw ``Input Dims`` / ``Input type`` /
``Concrete Inputs`` texts of a trace, and the cost record that formulas return.

Formulas read arguments by position (the op's schema order) through :class:`OpArgs`; an argument
that is missing or not of the expected kind raises :class:`ArgumentError`, which makes the op
"not understood" (it is then listed as unsupported, never counted as 0).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TypeVar

import msgspec

from traceprof.trace import schema
from traceprof.trace.tensors import ITEMSIZE as ITEMSIZE

Shape = tuple[int, ...]
_N = TypeVar("_N", int, float)

#: floating-point dtypes: outside matrix products, arithmetic on other dtypes (integer
#: counters, boolean masks) is not counted as FLOPs
FLOATING = frozenset(
    {
        "fp64",
        "fp32",
        "fp16",
        "bf16",
        "fp8_e4m3",
        "fp8_e5m2",
        "fp8_e8m0",
        "fp4x2",
        "complex32",
        "complex64",
        "complex128",
    }
)
#: dtype assumed for tensors whose element type the trace does not give: the elements of a
#: tensor list ("TensorList" has no element type), typically fp32 parameters and optimizer states
LIST_DTYPE = "fp32"
#: dtype of a tensor whose "Input type" traceprof does not know: counted as 1 byte per element,
#: so that bytes stay a lower bound
UNKNOWN_DTYPE = "unknown"


class ArgumentError(ValueError):
    """An op's arguments are not what its formula expects."""


class OpCost(msgspec.Struct, frozen=True):
    """What one op call computes and moves."""

    flops: float
    macs: float
    bytes_read: float
    bytes_written: float
    dtype: str  # canonical dtype of the computation (the first tensor operand's, usually)


def numel(shape: Iterable[int]) -> int:
    return math.prod(shape)


def nbytes(shape: Iterable[int], dtype: str) -> float:
    return numel(shape) * ITEMSIZE.get(dtype, 1)


class OpArgs:
    """Decoded arguments of one distinct (name, Input Dims, Input type, Concrete Inputs)."""

    __slots__ = ("dims", "name", "types", "values")

    def __init__(self, name: str, dims: Sequence, types: Sequence[str], values: Sequence[str]):
        self.name = name
        self.dims = tuple(dims)
        self.types = tuple(str(t) for t in types)
        self.values = tuple(str(v) for v in values)

    @classmethod
    def decode(cls, name: str, dims: bytes | None, types: bytes | None, values: bytes | None) -> OpArgs:
        """From the raw JSON texts (``None`` where the trace has none)."""
        try:
            d = msgspec.json.decode(dims) if dims else []
            t = msgspec.json.decode(types) if types else []
            v = msgspec.json.decode(values) if values else []
        except msgspec.DecodeError as e:
            raise ArgumentError(f"undecodable shape arguments ({e})") from None
        if not (isinstance(d, list) and isinstance(t, list) and isinstance(v, list)):
            raise ArgumentError("shape arguments are not lists")
        return cls(name, d, t, v)

    def __len__(self) -> int:
        return max(len(self.dims), len(self.types))

    # --- tensors

    def is_tensor(self, i: int) -> bool:
        if i >= len(self.types) or i >= len(self.dims):
            return False
        t, d = self.types[i], self.dims[i]
        if t in schema.DTYPE_SPELLINGS:
            return True
        # an element type traceprof does not know (c10::Float8_e3m4, quantized types ...)
        return t.startswith("c10::") and _is_shape(d)

    def shape(self, i: int) -> Shape:
        if not self.is_tensor(i) or not _is_shape(self.dims[i]):
            raise ArgumentError(f"{self.name}: argument {i} is not a tensor")
        return tuple(self.dims[i])

    def optional_shape(self, i: int) -> Shape | None:
        return self.shape(i) if self.is_tensor(i) else None

    def dtype(self, i: int) -> str:
        if not self.is_tensor(i):
            raise ArgumentError(f"{self.name}: argument {i} is not a tensor")
        return schema.DTYPE_SPELLINGS.get(self.types[i], UNKNOWN_DTYPE)

    def tensor_list(self, i: int) -> tuple[Shape, ...]:
        """The shapes of a tensor-list argument (raises when the trace did not record them)."""
        if i >= len(self.types) or self.types[i] != schema.TENSOR_LIST_TYPE:
            raise ArgumentError(f"{self.name}: argument {i} is not a tensor list")
        d = self.dims[i] if i < len(self.dims) else None
        if not d or not all(_is_shape(s) for s in d):
            raise ArgumentError(f"{self.name}: the shapes of tensor list {i} are not recorded")
        return tuple(tuple(s) for s in d)

    def is_tensor_list(self, i: int) -> bool:
        return i < len(self.types) and self.types[i] == schema.TENSOR_LIST_TYPE

    def first_dtype(self) -> str:
        """The dtype of the first tensor argument (the list dtype when there is none)."""
        for i in range(len(self)):
            if self.is_tensor(i):
                return self.dtype(i)
        return LIST_DTYPE

    def input_bytes(self) -> float:
        """Every tensor argument read once (tensor lists with :data:`LIST_DTYPE` elements)."""
        total = 0.0
        for i in range(len(self)):
            if self.is_tensor(i):
                total += nbytes(self.shape(i), self.dtype(i))
            elif self.is_tensor_list(i) and self.dims[i]:
                total += sum(nbytes(s, LIST_DTYPE) for s in self.dims[i] if _is_shape(s))
        return total

    # --- scalars ("Concrete Inputs")

    def value(self, i: int) -> str:
        return self.values[i] if i < len(self.values) else ""

    def _given(self, i: int, default: object) -> str | None:
        """The concrete text of argument ``i``; None when ``default`` applies: the argument is
        not recorded at all (an older schema) or was passed as None. An argument the trace
        records without its value (traces without "Concrete Inputs") raises."""
        v = self.value(i)
        if v != "":
            return v
        absent = i >= len(self)
        passed_none = bool(self.values) and i < len(self.types) and self.types[i] == ""
        if default is not None and (absent or passed_none):
            return None
        raise ArgumentError(f"{self.name}: the value of argument {i} is not in the trace")

    def flag(self, i: int, default: bool | None = None) -> bool:
        v = self._given(i, default)
        if v is None:
            return bool(default)
        if v == schema.CONCRETE_TRUE:
            return True
        if v == schema.CONCRETE_FALSE:
            return False
        raise ArgumentError(f"{self.name}: argument {i} is not a boolean ({v!r})")

    def integer(self, i: int, default: int | None = None) -> int:
        return self._scalar(i, default, int, "an integer")

    def number(self, i: int, default: float | None = None) -> float:
        return self._scalar(i, default, float, "a number")

    def _scalar(self, i: int, default: _N | None, kind: type[_N], what: str) -> _N:
        """Argument ``i`` as a ``kind`` (``what`` names it in the error), or ``default``."""
        v = self._given(i, default)
        if v is None:  # only when a default is given
            assert default is not None
            return kind(default)
        try:
            return kind(v)
        except ValueError:
            raise ArgumentError(f"{self.name}: argument {i} is not {what} ({v!r})") from None

    def ints(self, i: int, n: int | None = None, default: Sequence[int] | None = None) -> tuple[int, ...]:
        """An int-list argument (``"[1, 1]"``); a single int is repeated ``n`` times; an empty
        list takes ``default`` (pooling's ``stride=[]``)."""
        v = self._given(i, default)
        if v is None:  # only when a default is given
            assert default is not None
            return tuple(default)
        v = v.strip()
        try:
            if v.startswith("["):
                inner = v[1:-1].strip()
                out = tuple(int(x) for x in inner.split(",")) if inner else ()
            else:
                out = (int(v),)
        except ValueError:
            raise ArgumentError(f"{self.name}: argument {i} is not an int list ({v!r})") from None
        if not out and default is not None:
            return tuple(default)
        if n is not None and len(out) == 1:
            out = out * n
        if n is not None and len(out) != n:
            raise ArgumentError(f"{self.name}: argument {i} has {len(out)} values, expected {n}")
        return out

    def flags(self, i: int) -> tuple[bool, ...]:
        """A bool-list argument (``"[True, True, False]"``)."""
        v = self.value(i).strip()
        if not v.startswith("["):
            raise ArgumentError(f"{self.name}: argument {i} is not a bool list ({v!r})")
        parts = [p.strip() for p in v[1:-1].split(",") if p.strip()]
        if any(p not in (schema.CONCRETE_TRUE, schema.CONCRETE_FALSE) for p in parts):
            raise ArgumentError(f"{self.name}: argument {i} is not a bool list ({v!r})")
        return tuple(p == schema.CONCRETE_TRUE for p in parts)

    def scalar_type(self, i: int) -> str | None:
        """A ScalarType argument (an integer code) as a canonical dtype; None when absent."""
        v = self.value(i)
        try:
            return schema.SCALAR_TYPE_CODES.get(int(v))
        except ValueError:
            return None

    # --- building a cost

    def cost(
        self,
        flops: float,
        macs: float = 0.0,
        writes: Iterable[tuple[Shape, str]] = (),
        reads: float | None = None,
        dtype: str | None = None,
    ) -> OpCost:
        """``reads`` defaults to every tensor argument read once; ``writes`` lists the outputs
        as (shape, dtype)."""
        return OpCost(
            flops=float(flops),
            macs=float(macs),
            bytes_read=float(self.input_bytes() if reads is None else reads),
            bytes_written=float(sum(nbytes(s, d) for s, d in writes)),
            dtype=dtype or self.first_dtype(),
        )


def _is_shape(d) -> bool:
    return isinstance(d, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in d)


def broadcast(*shapes: Shape) -> Shape:
    """The broadcast shape of several shapes (numpy rules)."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(ndim):
        sizes = {s[len(s) - ndim + k] for s in shapes if len(s) - ndim + k >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise ArgumentError(f"shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)

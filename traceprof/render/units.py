"""The only place where numbers and shapes become text."""

from __future__ import annotations

from typing import Any


def duration(us: float, raw: bool = False) -> str:
    """Microseconds as a short human duration (``812.4 us``, ``3.21 ms``, ``1.20 s``)."""
    if raw:
        return f"{us:.3f}"
    a = abs(us)
    if a == 0:
        return "0"
    if a < 1000:
        return f"{us:.1f} us"
    if a < 1_000_000:
        return f"{us / 1000:.2f} ms"
    return f"{us / 1_000_000:.2f} s"


def percent(fraction: float) -> str:
    if fraction == 0:
        return "0%"
    if abs(fraction) < 0.001:
        return "<0.1%"
    return f"{fraction * 100:.1f}%"


def count(value: float) -> str:
    """A per-step count: an integer when whole, one decimal otherwise."""
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.1f}"


def big_number(value: float | None) -> str:
    """Parameter-style counts: 11.69 M, 9.41 k."""
    if value is None:
        return "--"
    for div, suffix in ((1e12, " T"), (1e9, " G"), (1e6, " M"), (1e3, " k")):
        if abs(value) >= div:
            return f"{value / div:.2f}{suffix}"
    return f"{int(value)}"


def shape(spec: Any) -> str:
    """A module table input/output spec as text: ``[32, 3, 224, 224]``, tuples as ``(a, b)``."""
    if spec is None:
        return "--"
    if isinstance(spec, dict):
        if "shape" in spec:
            return "[" + ", ".join(str(d) for d in spec["shape"]) + "]"
        if set(spec) == {"kwargs"}:
            return shape(spec["kwargs"])
        return "{" + ", ".join(f"{k}: {shape(v)}" for k, v in spec.items()) + "}"
    if isinstance(spec, list):
        inner = [shape(s) for s in spec if s is not None]
        if len(inner) == 1:
            return inner[0]
        return "(" + ", ".join(inner) + ")" if inner else "--"
    return "--"

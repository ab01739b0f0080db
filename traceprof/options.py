"""Numeric option values, checked once by one rule wherever they come from: a command line's
text (``cli.common.Number``) or a Python API's keyword argument (``traceprof.analyze``,
``analyze_job``, ``diff``). A value is a finite number of its kind within its bounds, never
``nan``, an infinity or a negative zero; an API argument comes out a plain ``int`` or ``float``
(``numpy.int64(2)`` is ``2``), so that what depends on it (a cache key, a worker's task) sees one
type."""

from __future__ import annotations

import math
import operator
from typing import Any, TypeVar

from traceprof.errors import OptionError

N = TypeVar("N", int, float)


def number(
    value: Any,
    kind: type[N],
    *,
    min: float | None = None,
    max: float | None = None,
    min_open: bool = False,
) -> N:
    """``value`` (a number, or its text) as a plain ``kind`` within ``min`` .. ``max``
    (``min_open``: above ``min``); a ValueError saying what is wrong with it otherwise."""
    text = value.strip() if isinstance(value, str) else repr(value)
    if isinstance(value, bool):
        raise ValueError(f"{text} is not a number")
    try:
        if isinstance(value, str):
            result: Any = kind(value.strip())
        elif kind is int:
            result = operator.index(value)  # an integer of any type; 2.5 and "2" are not
        else:
            result = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
    if not math.isfinite(result):
        raise ValueError(f"{text!r} is not a finite number")
    if result == 0 and (text.startswith("-") or math.copysign(1.0, result) < 0):
        raise ValueError(f"{text!r} is a negative zero: give 0")
    if min is not None and (result <= min if min_open else result < min):
        raise ValueError(f"{text} is not {'above' if min_open else 'at least'} {min:g}")
    if max is not None and result > max:
        raise ValueError(f"{text} is not at most {max:g}")
    return kind(result)


def argument(
    name: str,
    value: Any,
    kind: type[N],
    *,
    min: float | None = None,
    max: float | None = None,
    min_open: bool = False,
) -> N | None:
    """An API keyword argument checked by :func:`number` (None passes: the default); an
    :class:`~traceprof.errors.OptionError` naming it otherwise, as the command line refuses the
    option."""
    if value is None:
        return None
    try:
        return number(value, kind, min=min, max=max, min_open=min_open)
    except ValueError as e:
        raise OptionError(f"{name}: {e}") from None

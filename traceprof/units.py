"""The only place where numbers and shapes become text."""

from __future__ import annotations

from typing import Any

from traceprof import errors


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


def file_size(nbytes: int) -> str:
    """A file's size in MB with one decimal (``35.2 MB``)."""
    return f"{nbytes / 1e6:.1f} MB"


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


_SI = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si(value: float | None, unit: str, raw: bool = False) -> str:
    """A quantity with an SI prefix and three significant digits: ``5.77 TFLOP``,
    ``127 TFLOP/s``, ``27.6 GB``; ``--`` for None. ``raw``: the plain number."""
    if value is None:
        return "--"
    if raw:
        return f"{value:.0f}" if abs(value) >= 1 or value == 0 else f"{value:.6g}"
    if value == 0:
        return "0"
    a = abs(value)
    prefix, div = "", 1.0
    for d, p in _SI:
        if a >= d * 0.9995:
            prefix, div = p, d
            break
    x = value / div
    digits = f"{x:.0f}" if abs(x) >= 99.95 else f"{x:.1f}" if abs(x) >= 9.995 else f"{x:.2f}"
    return f"{digits} {prefix}{unit}"


def flops(value: float | None, raw: bool = False) -> str:
    return si(value, "FLOP", raw)


def flop_rate(value: float | None) -> str:
    return si(value, "FLOP/s")


def byte_count(value: float | None, raw: bool = False) -> str:
    return si(value, "B", raw)


def byte_rate(value: float | None) -> str:
    return si(value, "B/s")


def fraction(value: float | None) -> str:
    """A fraction as a percentage, ``--`` when unknown."""
    return "--" if value is None else percent(value)


def params(value: float | None, raw: bool = False) -> str:
    """A parameter count: ``11.69 M`` (``11689512`` raw), ``--`` when unknown."""
    if value is None:
        return "--"
    return f"{int(value)}" if raw else big_number(value)


def share(part: float | None, whole: float | None) -> str:
    """``part`` as a percentage of ``whole`` the way DeepSpeed's profiler writes it: two
    decimals at most, no trailing zeros (``100%``, ``6.51%``); ``--`` when either is unknown."""
    if part is None or not whole:
        return "--"
    return f"{round(100 * part / whole, 2):g}%"


def rate(value: float | None, unit: str, raw: bool = False) -> str:
    """A per-second rate of things (``24.7 samples/s``); ``--`` when unknown."""
    if value is None:
        return "--"
    if raw:
        return f"{value:.6g}"
    return si(value, unit)


def flop_rate_raw(value: float | None, raw: bool = False) -> str:
    """Achieved FLOP/s, a plain number with ``raw``."""
    return si(value, "FLOP/s", raw)


def mac_count(value: float | None, raw: bool = False) -> str:
    return si(value, "MAC", raw)


def python_dict(items: list[tuple[str, str]]) -> str:
    """``{'Conv2d': '9.41 k', ...}``: DeepSpeed's aggregated-profile lines print dicts."""
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in items) + "}"


# -- torchinfo-style text (the table format), as torchinfo 1.8.0 writes it ---------------------


def grouped(value: float | None) -> str:
    """An integer with thousands separators (``11,689,512``); ``--`` for None."""
    return "--" if value is None else f"{int(round(value)):,}"  # noqa: RUF046 - numpy floats round to floats


def torchinfo_count(value: float, auto_units: bool) -> str:
    """torchinfo's ``format_output_num``: ``": 11,689,512"`` for parameters, and with
    ``auto_units`` ``" (M): 595.87"`` / ``" (G): 1.82"`` / ``" (T): ..."`` for mult-adds."""
    label = ""
    if auto_units:
        label, value = (
            (" (T)", value / 1e12)
            if value >= 1e12
            else (" (G)", value / 1e9)
            if value >= 1e9
            else (" (M)", value / 1e6)
        )
    else:
        value = float(value)
    if float(value).is_integer():
        return f"{label}: {int(value):,d}"
    return f"{label}: {value:,.2f}"


def megabytes(num_bytes: float) -> str:
    """Bytes as torchinfo's ``(MB)`` lines show them: ``num / 1e6`` with two decimals."""
    return f"{num_bytes / 1e6:0.2f}"


def param_share(fraction: float | None) -> str:
    """torchinfo's ``Param %`` cell: ``  0.08%`` (7 wide, two decimals), ``     --`` for none."""
    if not fraction:
        return "     --"
    return f"{fraction:>7.2%}"


def dims(value: object) -> str:
    """A kernel or weight shape the way torchinfo prints it: ``[3, 3]``, ``5``, ``--``."""
    if value is None or value == [] or value == ():
        return "--"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(d) for d in value) + "]"
    return str(value)


def ratio(value: float | None, raw: bool = False) -> str:
    """A ratio such as max / median: ``1.24x``; ``--`` when unknown."""
    if value is None:
        return "--"
    return f"{value:.4f}" if raw else f"{value:.2f}x"


def approximate(value: float) -> str:
    """A rough factor: one decimal below 10, none above (``4.5``, ``37``)."""
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def signed_duration(us: float, raw: bool = False) -> str:
    """A difference of times with its sign: ``+1.20 ms``, ``-35.0 us``."""
    text = duration(us, raw)
    return text if text.startswith("-") or text == "0" else "+" + text


def signed_percent(fraction: float) -> str:
    text = percent(fraction)
    if text.startswith("<"):  # a tiny change keeps its sign: -<0.1%
        return ("-" if fraction < 0 else "+") + text
    return text if text.startswith("-") or text == "0%" else "+" + text


def label(text: str, width: int = 100) -> str:
    """A long name (a C++ kernel signature) cut to ``width`` characters with an ellipsis."""
    return text if len(text) <= width else text[: width - 1] + "…"


def label_tail(text: str, width: int) -> str:
    """A long path (a qualified module name) cut to ``width`` characters from the left, keeping
    its last parts: ``…BertLayer_3.BertAttention_0``."""
    return text if len(text) <= width else "…" + text[len(text) - width + 1 :]


def label_middle(text: str, width: int) -> str:
    """A long name cut to ``width`` characters in its middle, keeping its start and its end:
    ``autograd::engine::…autograd::AccumulateGrad``."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def counted(n: float, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun it counts, singular for one (``"1 run"``, ``"3 runs"``, ``"2 indices"``
    with ``plural``)."""
    return f"{count(n)} {noun if n == 1 else plural or noun + 's'}"


def step_count(value: float, noun: str, mean: bool) -> str:
    """A count per step and what it counts (``"60 kernels"``); a mean over several steps says
    so (``"mean 998.3 kernels"``), since a fraction of a kernel or a call reads as a mistake."""
    return f"{'mean ' if mean else ''}{count(value)} {noun}"


#: ``text`` for a person's terminal, every control character but the newline shown as an escape:
#: written once, in errors.py, where every error message of traceprof's passes through it
printable = errors.printable

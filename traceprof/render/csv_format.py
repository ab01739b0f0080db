"""CSV: one row per node, the columns of :func:`records.profile_rows`; and :func:`write_csv`,
which every CSV of traceprof (a profile, an ops table, a job, a diff) is written with.

Names from a trace go into text cells, and a spreadsheet runs a cell that starts like a formula
(``=HYPERLINK(...)``, ``+cmd|...``): :func:`neutralized` prefixes such text with ``'``, as the
OWASP guidance on CSV injection says; numbers stay numbers (docs/security.md).

Times (the columns named ``*_us``) are written to the nanosecond, the resolution of trace
timestamps: a duration computed from timestamps of about 10^12 us carries the float64 step of
such numbers (2^-12 us), as in ``309.437744140625``, and sums carry float64 rounding
(``7.648000000000001``). Every other number is written as computed (float64, shortest form)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from traceprof.render.registry import RenderOptions
from traceprof.result.model import ModuleProfile
from traceprof.result.records import profile_rows

#: the first characters that make a spreadsheet read a text cell as a formula
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
#: the suffix of a time column in microseconds, and its decimals as written (1 ns)
TIME_SUFFIX = "_us"
TIME_DECIMALS = 3


def neutralized(value: Any) -> Any:
    """A cell as written: text that starts like a formula with ``'`` before it; anything else
    (numbers, negative ones included, None, other text) unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def cell_value(column: str, value: Any) -> Any:
    """A number as written in ``column``: a time in us rounded to TIME_DECIMALS (``-0.0``
    written as ``0.0``); anything else unchanged."""
    if column.endswith(TIME_SUFFIX) and isinstance(value, float):
        return round(value, TIME_DECIMALS) + 0.0
    return value


def write_csv(rows: Iterable[Mapping[str, Any]], fieldnames: Sequence[str]) -> str:
    """``rows`` as CSV text under a header of ``fieldnames``, numbers as :func:`cell_value`
    writes them, text cells :func:`neutralized`.

    A row with a carriage return in a cell is written with ``\\r\\n`` line ends and then ended
    with ``\\n`` like the others: Python before 3.13 quotes only the characters of the line
    terminator, and would leave such a cell unquoted (a reader would split the row there)."""
    all_rows = rows if isinstance(rows, list) else list(rows)
    names = list(fieldnames)
    known = set(names)
    times = [name.endswith(TIME_SUFFIX) for name in names]
    absent = [""] * len(names)  # a field a row lacks: empty, as csv.DictWriter writes it

    def cells(row: Mapping[str, Any]) -> list[Any]:
        # cell_value and neutralized, inline: a large tree's CSV has 50,000 cells
        if len(row) > len(names) or not known.issuperset(row):
            wrong = ", ".join(repr(name) for name in row if name not in known)
            raise ValueError(f"dict contains fields not in fieldnames: {wrong}")  # as csv.DictWriter
        return [
            round(v, TIME_DECIMALS) + 0.0
            if t and isinstance(v, float)
            else "'" + v
            if isinstance(v, str) and v.startswith(FORMULA_STARTS)
            else v
            for t, v in zip(times, map(row.get, names, absent))
        ]

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(names)
    writer.writerows(map(cells, all_rows))
    text = buf.getvalue()
    if "\r" not in text:  # the writer writes none: no cell holds one
        return text
    return _write_csv_rows_with_cr(all_rows, names)


def _write_csv_rows_with_cr(rows: list[Mapping[str, Any]], fieldnames: list[str]) -> str:
    """:func:`write_csv` of rows of which some hold a carriage return, row by row."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fieldnames, lineterminator="\n")
    scratch = io.StringIO()
    cr_writer = csv.DictWriter(scratch, fieldnames=fieldnames, lineterminator="\r\n")
    writer.writeheader()
    for row in rows:
        cells = {key: neutralized(cell_value(key, value)) for key, value in row.items()}
        if any(isinstance(value, str) and "\r" in value for value in cells.values()):
            scratch.seek(0)
            scratch.truncate()
            cr_writer.writerow(cells)
            buf.write(scratch.getvalue()[: -len("\r\n")] + "\n")
        else:
            writer.writerow(cells)
    return buf.getvalue()


def render_csv(profile: ModuleProfile, opts: RenderOptions) -> str:
    rows = profile_rows(profile)
    return write_csv(rows, list(rows[0]) if rows else ["id"])

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
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(fieldnames), lineterminator="\n")
    scratch = io.StringIO()
    cr_writer = csv.DictWriter(scratch, fieldnames=list(fieldnames), lineterminator="\r\n")
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

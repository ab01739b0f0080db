"""Rows as a Parquet file: the one writer of every Parquet output (a profile, its ops, a job, a
diff), with the trace and the schema in the file's metadata.

The columns are built from the rows' values into Arrow buffers here and written by pyarrow:
converting Python objects through pyarrow imports pandas (pyarrow looks for pandas objects
among them), and pandas' import alone took longer than a cached look at a trace.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from traceprof.errors import MissingDependencyError

#: a column's type where its values do not give it (pandas' names, as to_dataframe's frames)
COLUMN_TYPES = ("float64", "int64", "bool")


def rows_parquet(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    types: Mapping[str, str],
    metadata: Mapping[str, str | bytes],
) -> bytes:
    """``rows`` as the bytes of a Parquet file: the ``columns`` in order, typed by ``types``
    (column -> one of COLUMN_TYPES) or else by their values (text, integers, floats, booleans:
    the types pandas gives the same rows), a missing value (None, NaN) as a null; ``metadata``
    (key -> value) in the file's metadata under ``traceprof.<key>`` (needs pyarrow)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingDependencyError(
            "Parquet output needs pyarrow: pip install 'traceprof[parquet]'"
        ) from None
    unknown = set(types.values()) - set(COLUMN_TYPES)
    if unknown:  # a caller's mistake: a typo must not become a float column
        raise ValueError(f"column types {sorted(unknown)} are none of {COLUMN_TYPES}")
    arrays = [_column(pa, [r[c] for r in rows], types.get(c)) for c in columns]
    table = pa.Table.from_arrays(
        arrays,
        names=list(columns),
        metadata={
            f"traceprof.{key}".encode(): value if isinstance(value, bytes) else value.encode()
            for key, value in metadata.items()
        },
    )
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _column(pa: Any, values: list[Any], kind: str | None) -> Any:
    """One column's Arrow array, from its buffers."""
    import numpy as np  # here: the flat records import this module, and most looks need no numpy

    n = len(values)
    kind = kind or _kind_of(values)
    if kind == "null":
        return pa.nulls(n)
    valid = np.fromiter((v is not None and v == v for v in values), dtype=bool, count=n)  # NaN != NaN
    nulls = int(n - valid.sum())
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    if kind == "string":
        text = [v.encode("utf-8", "replace") if ok else b"" for v, ok in zip(values, valid)]
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum([len(t) for t in text], out=offsets[1:])
        buffers = [bitmap, pa.py_buffer(offsets), pa.py_buffer(b"".join(text))]
        return pa.Array.from_buffers(pa.large_string(), n, buffers, null_count=nulls)
    if kind == "bool":
        bits = np.packbits(
            np.fromiter((bool(v) and ok for v, ok in zip(values, valid)), bool, n), bitorder="little"
        )
        return pa.Array.from_buffers(pa.bool_(), n, [bitmap, pa.py_buffer(bits)], null_count=nulls)
    dtype, arrow = (np.int64, pa.int64()) if kind == "int64" else (np.float64, pa.float64())
    data = np.fromiter((v if ok else 0 for v, ok in zip(values, valid)), dtype=dtype, count=n)
    return pa.Array.from_buffers(arrow, n, [bitmap, pa.py_buffer(data)], null_count=nulls)


def _kind_of(values: list[Any]) -> str:
    """The type the values give: text if any is text, else a boolean column, an integer column,
    or floats (integers and floats mixed); "null" when every value is missing."""
    present = [v for v in values if v is not None]
    if not present:
        return "null"
    if any(isinstance(v, str) for v in present):
        return "string"
    if all(isinstance(v, bool) for v in present):
        return "bool"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present) and len(present) == len(values):
        return "int64"
    return "float64"

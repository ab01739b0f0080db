"""Parquet: the rows of :meth:`ModuleProfile.to_dataframe`, typed, for pandas, polars, DuckDB.

Needs pyarrow (``pip install 'traceprof[parquet]'``); without it, a one-line error.
"""

from __future__ import annotations

import io
import json

from ..errors import MissingDependencyError
from ..profile import ModuleProfile
from . import RenderOptions, register
from .records import JSON_SCHEMA


@register("parquet", (".parquet", ".pq"), "one row per node, typed columns (needs pyarrow)",
          binary=True, shows_warnings=False)
def render_parquet(profile: ModuleProfile, opts: RenderOptions) -> bytes:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingDependencyError(
            "Parquet output needs pyarrow: pip install 'traceprof[parquet]'") from None
    table = pa.Table.from_pandas(profile.to_dataframe(), preserve_index=False)
    # the trace and the schema travel with the rows
    table = table.replace_schema_metadata({
        **(table.schema.metadata or {}),
        b"traceprof.schema": JSON_SCHEMA.encode(),
        b"traceprof.trace": profile.metadata.path.encode("utf-8", "surrogateescape"),
        b"traceprof.hierarchy": profile.source.encode(),
        b"traceprof.warnings": json.dumps(list(profile.warnings)).encode(),
    })
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()

"""Parquet: the rows of :meth:`ModuleProfile.to_dataframe`, typed, for pandas, polars, DuckDB.

Needs pyarrow (``pip install 'traceprof[parquet]'``); without it, a one-line error.
"""

from __future__ import annotations

from ..profile import ModuleProfile
from ..records import parquet_bytes
from . import RenderOptions, register


@register("parquet", (".parquet", ".pq"), "one row per node, typed columns (needs pyarrow)",
          binary=True, shows_warnings=False)
def render_parquet(profile: ModuleProfile, opts: RenderOptions) -> bytes:
    return parquet_bytes(profile)

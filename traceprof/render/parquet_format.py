"""Parquet: the rows of :meth:`ModuleProfile.to_dataframe`, typed, for pandas, polars, DuckDB.

Needs pyarrow (``pip install 'traceprof[parquet]'``); without it, a one-line error.
"""

from __future__ import annotations

from traceprof.render.registry import RenderOptions
from traceprof.result.model import ModuleProfile
from traceprof.result.records import parquet_bytes


def render_parquet(profile: ModuleProfile, opts: RenderOptions) -> bytes:
    return parquet_bytes(profile)

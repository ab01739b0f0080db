"""The flat records of a profile, for the renderers (defined in :mod:`traceprof.records`)."""

from __future__ import annotations

from traceprof.result.records import (  # noqa: F401
    JSON_SCHEMA,
    MEMORY_FIELDS,
    RATE_FIELDS,
    node_record,
    parquet_bytes,
    profile_dataframe,
    profile_rows,
    times_record,
)

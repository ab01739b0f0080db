"""A job as JSON, CSV and Parquet: the records of :mod:`traceprof.job.records`, written out."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import msgspec

from traceprof.job.records import JOB_SCHEMA, ROW_COLUMNS, ROW_TYPES, job_document, job_rows
from traceprof.render.csv_format import write_csv
from traceprof.render.registry import RenderOptions
from traceprof.result.parquet import rows_parquet

if TYPE_CHECKING:
    from traceprof.job.model import Job


def render_job_json(job: Job, opts: RenderOptions) -> str:
    doc = job_document(job)
    doc["rows"] = job_rows(job)
    return msgspec.json.format(msgspec.json.encode(doc), indent=1).decode() + "\n"


def render_job_csv(job: Job, opts: RenderOptions) -> str:
    return write_csv(job_rows(job), ROW_COLUMNS)


def render_job_parquet(job: Job, opts: RenderOptions) -> bytes:
    return rows_parquet(
        job_rows(job),
        ROW_COLUMNS,
        ROW_TYPES,
        {
            "schema": JOB_SCHEMA,
            "traces": json.dumps([r.path for r in job.ranks]),
            "warnings": json.dumps(list(job.warnings)),
        },
    )

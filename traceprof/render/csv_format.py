"""CSV: one row per node, the columns of :func:`records.profile_rows`."""

from __future__ import annotations

import csv
import io

from traceprof.render.registry import RenderOptions
from traceprof.result.model import ModuleProfile
from traceprof.result.records import profile_rows


def render_csv(profile: ModuleProfile, opts: RenderOptions) -> str:
    rows = profile_rows(profile)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["id"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()

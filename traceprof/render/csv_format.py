"""CSV: one row per node, the columns of :func:`records.profile_rows`."""

from __future__ import annotations

import csv
import io

from ..profile import ModuleProfile
from . import RenderOptions, register
from ..records import profile_rows


@register("csv", (".csv",), "one row per node, numbers in microseconds", shows_warnings=False)
def render_csv(profile: ModuleProfile, opts: RenderOptions) -> str:
    rows = profile_rows(profile)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["id"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()

"""HTML report of a job: one self-contained page with the rank x module heat map (job.js) over
the module tree of the rank a click opens (index.js's report). The page embeds the job's JSON
document with every rank's profile document; nothing is loaded from the network and the
Content-Security-Policy lets only the page's own script run (as the single-trace report)."""

from __future__ import annotations

import base64
import hashlib
import html
import os

from ..job import Job
from . import RenderOptions, register_job
from .html import script_json, static_text
from .job_records import JOB_SCHEMA, job_document

_FORBIDDEN_IN_SCRIPT = ("</script", "<!--", "<script")


def job_script() -> str:
    code = static_text("index.js") + "\n" + static_text("job.js")
    lowered = code.lower()
    for bad in _FORBIDDEN_IN_SCRIPT:
        if bad in lowered:
            raise RuntimeError(f"the frontend contains {bad!r}; it cannot be inlined in a <script>")
    return (f"\n{code}\n"
            "const data = (id) => JSON.parse(document.getElementById(id).textContent);\n"
            "useJobHelpers({el, duration, percent, renderReport});\n"
            "window.traceprofJob = renderJob(data('traceprof-job'), data('traceprof-report'));\n")


def _policy(script: str) -> str:
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return ("default-src 'none'; "
            f"script-src 'sha256-{digest}'; "
            "style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'")


def job_html(job: Job) -> str:
    from .. import __version__

    doc = job_document(job, with_profiles=True)
    where = os.path.dirname(job.ranks[0].path) or "."
    name = f"{len(job.ranks)} ranks · {where}"
    page = {"title": f"traceprof job: {name}",
            "footer": f"traceprof {__version__} · {JOB_SCHEMA} · {where}"}
    script = job_script()
    style = static_text("style.css")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{html.escape(_policy(script))}">
<meta name="generator" content="traceprof {html.escape(__version__)}">
<title>traceprof · {html.escape(name)}</title>
<style>
{style}</style>
</head>
<body class="tp-body">
<noscript><div class="tp-message">This report draws its heat map with JavaScript; enable it to
see it. The job is in the element #traceprof-job (traceprof's job JSON document,
docs/jobs.md).</div></noscript>
<script type="application/json" id="traceprof-job">{script_json(doc)}</script>
<script type="application/json" id="traceprof-report">{script_json(page)}</script>
<script type="module">{script}</script>
</body>
</html>
"""


@register_job("html", (".html", ".htm"),
              "self-contained HTML: rank x module heat map, click a cell for the rank's tree")
def render_job_html(job: Job, opts: RenderOptions) -> str:
    return job_html(job)

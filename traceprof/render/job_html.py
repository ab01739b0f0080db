"""HTML report of a job: one self-contained page with the rank x module heat map (job.js) over
the module tree of the rank a click opens (index.js's report). The page embeds the job's JSON
document with every rank's profile document and its timeline of a step; nothing is loaded from
the network and the Content-Security-Policy lets only the page's own script run (as the
single-trace report)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from traceprof.job.records import JOB_SCHEMA, job_document, module_id
from traceprof.render.html import frontend_script, html_page
from traceprof.render.job_text import job_short_names
from traceprof.render.registry import RenderOptions

if TYPE_CHECKING:  # the job module is imported by whoever builds a Job
    from traceprof.job.model import Job


def job_script() -> str:
    return frontend_script(
        ("index.js", "job.js"),
        "useJobHelpers({el, duration, percent, signed, renderReport, treeShortNames});\n"
        "window.traceprofJob = renderJob(data('traceprof-job'), "
        "data('traceprof-report'));\n",
    )


def job_html(job: Job) -> bytes:
    from traceprof.version import __version__

    doc = job_document(job, with_profiles=True)
    for r in job.ranks:  # a rank's tree opens with its timeline of a step, as a trace's report
        doc["profiles"][str(r.rank)]["timeline"] = (
            r.profile.timeline.document() if r.profile.timeline else None
        )
    where = os.path.dirname(job.ranks[0].path) or "."
    short = job_short_names(job)
    named = list(job.modules) + [m for s in job.stragglers for m, _ in s.modules]
    name = f"{len(job.ranks)} ranks · {where}"
    page = {
        "title": f"traceprof job: {name}",
        "footer": f"traceprof {__version__} · {JOB_SCHEMA} · {where}",
        # the rows' names by module id, told apart among every rank's nodes (not the rows shown)
        "short_names": {module_id(m): short[m.key] for m in named},
    }
    noscript = (
        "This report draws its heat map with JavaScript; enable it to see it. The job is "
        "in the element #traceprof-job (traceprof's job JSON document, docs/jobs.md)."
    )
    return html_page(name, noscript, job_script(), {"traceprof-job": doc, "traceprof-report": page})


def render_job_html(job: Job, opts: RenderOptions) -> bytes:
    return job_html(job)

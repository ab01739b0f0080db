"""Renderers: each turns a result (a ModuleProfile, a job, a diff) into text or bytes. The tables
below list them by format name, with the file extensions that select them for ``-o FILE``; a new
output format is a function in its own module and one row here (docs/architecture.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceprof.render.registry import (
    Registry,
    Renderer,
    RenderOptions,
    csv_renderer,
    imported,
    parquet_renderer,
)

if TYPE_CHECKING:
    from traceprof.result.model import ModuleProfile

# Each renderer's module is imported when it renders (registry.imported): a look at a trace
# imports the format it shows, not every format's module and what they import
# (docs/performance.md "Start-up").

#: renderers of one trace's ModuleProfile
REGISTRY = Registry(
    "unknown format {name!r} (known: {known})",
    (
        csv_renderer("one row per node, numbers in microseconds", imported("csv_format", "render_csv")),
        Renderer(
            "json",
            (".json",),
            "JSON document (schema traceprof.profile)",
            imported("json_format", "render_json"),
        ),
        Renderer(
            "html",
            (".html", ".htm"),
            "self-contained HTML report: icicle chart (forward | backward | other) and module table",
            imported("html", "render_html"),
        ),
        parquet_renderer(
            "one row per node, typed columns (needs pyarrow)", imported("parquet_format", "render_parquet")
        ),
        Renderer(
            "table", (".table",), "one row per module (torchinfo style)", imported("table", "render_table")
        ),
        Renderer(
            "tree",
            (".txt", ".tree"),
            "DeepSpeed-flops-profiler-style report: summary, aggregated profile, detailed module tree",
            imported("tree", "render_tree"),
        ),
    ),
)
get, for_path, for_output = REGISTRY.renderer, REGISTRY.for_path, REGISTRY.for_output


def render(profile: ModuleProfile, fmt: str, options: RenderOptions | None = None) -> str | bytes:
    return REGISTRY.render(profile, fmt, options)


#: renderers of a job (traceprof.job.model.Job), by format name; the same names and extensions
#: as the single-trace ones, so -o and --format choose them alike
JOB_REGISTRY = Registry(
    "format {name!r} is not written for a job of several traces (job formats: {known})",
    (
        Renderer(
            "json",
            (".json",),
            "JSON document (schema traceprof.job)",
            imported("job_formats", "render_job_json"),
        ),
        csv_renderer("one row per module x rank x pass", imported("job_formats", "render_job_csv")),
        parquet_renderer(
            "one row per module x rank x pass, typed columns", imported("job_formats", "render_job_parquet")
        ),
        Renderer(
            "html",
            (".html", ".htm"),
            "self-contained HTML: rank x module heat map, click a cell for the rank's tree",
            imported("job_html", "render_job_html"),
        ),
        Renderer(
            "tree",
            (".txt",),
            "job report: ranks, stragglers, module tree across ranks",
            imported("job_text", "render_job_tree"),
        ),
        Renderer(
            "table",
            (".table",),
            "job report with a flat table of qualified module names",
            imported("job_text", "render_job_table"),
        ),
    ),
)
get_job = JOB_REGISTRY.renderer


def render_job(job, fmt: str, options: RenderOptions | None = None) -> str | bytes:
    """A job (several ranks' traces) in format ``fmt``."""
    return JOB_REGISTRY.render(job, fmt, options)


__all__ = [
    "JOB_REGISTRY",
    "REGISTRY",
    "Registry",
    "RenderOptions",
    "Renderer",
    "for_output",
    "for_path",
    "get",
    "get_job",
    "render",
    "render_job",
]

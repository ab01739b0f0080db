"""Renderers: each turns a ModuleProfile into text. They register themselves by name and by the
file extensions that select them for ``-o FILE``."""

from __future__ import annotations

import os
from typing import Callable

import msgspec

from ..errors import OptionError
from ..profile import ModuleProfile


class RenderOptions(msgspec.Struct, frozen=True):
    raw_numbers: bool = False  # microseconds as plain numbers instead of "1.23 ms"
    unsupported_ops: bool = False  # list the ops without a FLOP formula (tree and table)
    batch_size: int | None = None  # tree: samples per step per rank [default: module table]
    top_modules: int = 3  # tree: modules per depth in the aggregated profile (DeepSpeed: 1)
    columns: tuple[str, ...] | None = None  # table: columns shown [default: table.DEFAULT_COLUMNS]
    ranks: str = "summary"  # job tree and table: "summary" columns, or "all" (one per rank too)
    depth: int | None = None  # job reports: modules down to this depth


class Renderer(msgspec.Struct, frozen=True):
    name: str
    extensions: tuple[str, ...]
    description: str
    render: Callable[[ModuleProfile, RenderOptions], str | bytes]
    binary: bool = False  # returns bytes, written to a file only
    #: the output has a place for the profile's warnings; else the command line prints them
    shows_warnings: bool = True


class Registry(dict):
    """Renderers of one kind of result (a profile, a job, a diff) by format name, each
    registering itself with :meth:`register`; -o FILE chooses one by the file's extension."""

    def __init__(self, unknown: str) -> None:
        super().__init__()
        self.unknown = unknown  # the error for an unknown format name: {name!r}, {known}

    def register(self, name: str, extensions: tuple[str, ...], description: str,
                 binary: bool = False, shows_warnings: bool = True):
        def wrap(fn: Callable[..., str | bytes]):
            self[name] = Renderer(name, extensions, description, fn, binary, shows_warnings)
            return fn

        return wrap

    def renderer(self, name: str) -> Renderer:
        try:
            return self[name]
        except KeyError:
            raise OptionError(self.unknown.format(name=name, known=", ".join(self))) from None

    def for_path(self, path: str) -> Renderer | None:
        """The renderer an output file name asks for, by its extension (the longest that
        matches)."""
        lower = path.lower()
        best = None
        for r in self.values():
            for ext in r.extensions:
                if lower.endswith(ext) and (best is None or len(ext) > len(best[1])):
                    best = (r, ext)
        return best[0] if best else None

    def for_output(self, path: str) -> Renderer | None:
        """The renderer ``-o PATH`` asks for when no format is given: by the extension of the
        file name; None when the name has no extension (``-``, ``/dev/stdout``, ``report``);
        an OptionError for an extension no renderer writes (``out.xlsx``), rather than the
        default format under a name that promises another."""
        chosen = self.for_path(path)
        extension = os.path.splitext(os.path.basename(path))[1]
        if chosen is None and extension:
            known = ", ".join(ext for r in self.values() for ext in r.extensions)
            raise OptionError(f"{path}: unknown output extension {extension!r} (known: {known}); "
                              "give --format to write this file in one of the formats anyway")
        return chosen

    def render(self, result, fmt: str, options: RenderOptions | None = None) -> str | bytes:
        return self.renderer(fmt).render(result, options or RenderOptions())


#: renderers of one trace's ModuleProfile
REGISTRY = Registry("unknown format {name!r} (known: {known})")
register, get, for_path, for_output = (REGISTRY.register, REGISTRY.renderer, REGISTRY.for_path,
                                       REGISTRY.for_output)


def render(profile: ModuleProfile, fmt: str, options: RenderOptions | None = None) -> str | bytes:
    return REGISTRY.render(profile, fmt, options)


#: renderers of a job (traceprof.job.Job), by format name; the same names and extensions as the
#: single-trace ones, so -o and --format choose them alike
JOB_REGISTRY = Registry("format {name!r} is not written for a job of several traces "
                        "(job formats: {known})")
register_job, get_job = JOB_REGISTRY.register, JOB_REGISTRY.renderer


def render_job(job, fmt: str, options: RenderOptions | None = None) -> str | bytes:
    """A job (several ranks' traces) in format ``fmt``."""
    return JOB_REGISTRY.render(job, fmt, options)


# registration happens on import
from . import csv_format, html, json_format, parquet_format, table, tree  # noqa: E402,F401
from . import job_html, job_records, job_text  # noqa: E402,F401

"""Renderers: each turns a ModuleProfile into text. They register themselves by name and by the
file extensions that select them for ``-o FILE``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from ..errors import OptionError
from ..profile import ModuleProfile


@dataclass(frozen=True, slots=True)
class RenderOptions:
    raw_numbers: bool = False  # microseconds as plain numbers instead of "1.23 ms"
    unsupported_ops: bool = False  # list the ops without a FLOP formula (tree and table)
    batch_size: int | None = None  # tree: samples per step per rank [default: module table]
    top_modules: int = 3  # tree: modules per depth in the aggregated profile (DeepSpeed: 1)
    columns: tuple[str, ...] | None = None  # table: columns shown [default: table.DEFAULT_COLUMNS]
    ranks: str = "summary"  # job tree and table: "summary" columns, or "all" (one per rank too)
    depth: int | None = None  # job reports: modules down to this depth


@dataclass(frozen=True, slots=True)
class Renderer:
    name: str
    extensions: tuple[str, ...]
    description: str
    render: Callable[[ModuleProfile, RenderOptions], str | bytes]
    binary: bool = False  # returns bytes, written to a file only
    #: the output has a place for the profile's warnings; else the command line prints them
    shows_warnings: bool = True


REGISTRY: dict[str, Renderer] = {}


def register(name: str, extensions: tuple[str, ...], description: str, binary: bool = False,
             shows_warnings: bool = True):
    def wrap(fn: Callable[[ModuleProfile, RenderOptions], str | bytes]):
        REGISTRY[name] = Renderer(name, extensions, description, fn, binary, shows_warnings)
        return fn

    return wrap


def get(name: str) -> Renderer:
    try:
        return REGISTRY[name]
    except KeyError:
        raise OptionError(f"unknown format {name!r} (known: {', '.join(REGISTRY)})") from None


def for_path(path: str) -> Renderer | None:
    """The renderer an output file name asks for, by its extension."""
    lower = path.lower()
    best = None
    for r in REGISTRY.values():
        for ext in r.extensions:
            if lower.endswith(ext) and (best is None or len(ext) > len(best[1])):
                best = (r, ext)
    return best[0] if best else None


def for_output(path: str) -> Renderer | None:
    """The renderer ``-o PATH`` asks for when no format is given: by the extension of the file
    name; None when the name has no extension (``-``, ``/dev/stdout``, ``report``); an
    OptionError for an extension no renderer writes (``out.xlsx``), rather than the default
    format under a name that promises another."""
    chosen = for_path(path)
    extension = os.path.splitext(os.path.basename(path))[1]
    if chosen is None and extension:
        known = ", ".join(ext for r in REGISTRY.values() for ext in r.extensions)
        raise OptionError(f"{path}: unknown output extension {extension!r} (known: {known}); "
                          "give --format to write this file in one of the formats anyway")
    return chosen


def render(profile: ModuleProfile, fmt: str, options: RenderOptions | None = None) -> str | bytes:
    return get(fmt).render(profile, options or RenderOptions())


#: renderers of a job (traceprof.job.Job), by format name; the same names and extensions as the
#: single-trace ones, so -o and --format choose them alike
JOB_REGISTRY: dict[str, Renderer] = {}


def register_job(name: str, extensions: tuple[str, ...], description: str, binary: bool = False,
                 shows_warnings: bool = True):
    def wrap(fn):
        JOB_REGISTRY[name] = Renderer(name, extensions, description, fn, binary, shows_warnings)
        return fn

    return wrap


def get_job(name: str) -> Renderer:
    try:
        return JOB_REGISTRY[name]
    except KeyError:
        raise OptionError(f"format {name!r} is not written for a job of several traces "
                          f"(job formats: {', '.join(JOB_REGISTRY)})") from None


def render_job(job, fmt: str, options: RenderOptions | None = None) -> str | bytes:
    """A job (several ranks' traces) in format ``fmt``."""
    return get_job(fmt).render(job, options or RenderOptions())


# registration happens on import
from . import csv_format, html, json_format, parquet_format, table, tree  # noqa: E402,F401
from . import job_html, job_records, job_text  # noqa: E402,F401

"""What a renderer is, and the table of renderers of one kind of result: chosen by format name,
or by the extension of the file ``-o`` writes. The text formats written for people to read
(:data:`TEXT_FORMATS`) show the control characters of their names escaped (docs/security.md)."""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from typing import Any

import msgspec

from traceprof import units
from traceprof.errors import OptionError

#: the formats written for people to read (every registry's tree and table): the control
#: characters of the names in them (ESC, CR, BEL, ...) are shown escaped, wherever the text goes
TEXT_FORMATS = frozenset({"tree", "table"})


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
    #: (a profile, a job or a diff, options) -> the output: text as a str, or as UTF-8 bytes
    #: where it is made as bytes (the HTML pages), or a binary format's bytes
    render: Callable[[Any, RenderOptions], str | bytes]
    binary: bool = False  # returns bytes that are no text, written to a file only
    #: the output has a place for the profile's warnings; else the command line prints them
    shows_warnings: bool = True


def csv_renderer(description: str, render: Callable[[Any, RenderOptions], str | bytes]) -> Renderer:
    """The CSV renderer of a kind of result: chosen by ``.csv``; rows only, with no place for
    the result's warnings (the command line prints them on stderr)."""
    return Renderer("csv", (".csv",), description, render, shows_warnings=False)


def parquet_renderer(description: str, render: Callable[[Any, RenderOptions], str | bytes]) -> Renderer:
    """The Parquet renderer of a kind of result: chosen by ``.parquet`` or ``.pq``; typed rows
    as bytes (written to a file only), with no place for the result's warnings."""
    return Renderer("parquet", (".parquet", ".pq"), description, render, binary=True, shows_warnings=False)


class Registry(dict):
    """Renderers of one kind of result (a profile, a job, a diff) by format name, in the order
    given (the order of help texts and error messages); -o FILE chooses one by the file's
    extension."""

    def __init__(self, unknown: str, renderers: tuple[Renderer, ...]) -> None:
        super().__init__((r.name, _for_people(r)) for r in renderers)
        self.unknown = unknown  # the error for an unknown format name: {name!r}, {known}

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
            raise OptionError(
                f"{path}: unknown output extension {extension!r} (known: {known}); "
                "give --format to write this file in one of the formats anyway"
            )
        return chosen

    def render(
        self, result, fmt: str, options: RenderOptions | None = None, *, encoded: bool = False
    ) -> str | bytes:
        """``result`` in format ``fmt``: a text format as a str, or with ``encoded`` as the UTF-8
        bytes a renderer may make it in (what the command line writes: a page of several MB
        does not go through a str and back); a binary format as bytes."""
        renderer = self.renderer(fmt)
        out = renderer.render(result, options or RenderOptions())
        if isinstance(out, bytes) and not renderer.binary and not encoded:
            return out.decode("utf-8")
        return out


def _for_people(renderer: Renderer) -> Renderer:
    """A renderer of :data:`TEXT_FORMATS` whose text shows control characters escaped
    (:func:`units.printable`); any other renderer as it is (data formats keep names raw)."""
    if renderer.name not in TEXT_FORMATS or renderer.binary:
        return renderer
    render = renderer.render

    @functools.wraps(render)
    def printable(result: Any, options: RenderOptions) -> str | bytes:
        text = render(result, options)
        return units.printable(text) if isinstance(text, str) else text

    return msgspec.structs.replace(renderer, render=printable)


def imported(module: str, function: str) -> Callable[[Any, RenderOptions], str | bytes]:
    """The renderer ``function`` of ``traceprof.render.<module>``, imported when it first
    renders: a table of renderers imports none of them, and a command imports the one format
    it writes (docs/performance.md "Start-up")."""
    path = f"traceprof.render.{module}"

    def render(result: Any, options: RenderOptions) -> str | bytes:
        found: Callable[[Any, RenderOptions], str | bytes] = getattr(importlib.import_module(path), function)
        return found(result, options)

    render.__name__ = render.__qualname__ = function
    render.__module__ = path
    return render

"""Command line: each command turns its options into one API call and prints or writes the result."""

from __future__ import annotations

import os
import sys

import click

from . import render
from .api import analyze as analyze_api
from .errors import OptionError, TraceprofError
from .hierarchy import Source
from .output import write_atomic
from .transforms import SortKey

_SOURCES = ["auto"] + [s.value for s in Source if s is not Source.NONE]


def _progress_reporter(path: str):
    """Status lines on stderr for big traces when a person is watching."""
    try:
        big = os.path.getsize(path) > 20_000_000
    except OSError:
        big = False
    if not (big and sys.stderr.isatty()):
        return None

    def report(message: str) -> None:
        click.echo(f"\r\033[K{message} ...", err=True, nl=False)

    return report


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="traceprof")
def main() -> None:
    """Per-nn.Module GPU time, forward and backward, from PyTorch profiler traces."""


@main.command()
@click.argument("trace", type=click.Path(dir_okay=True, path_type=str))
@click.option("-f", "--format", "fmt", type=click.Choice(sorted(render.REGISTRY)), default=None,
              help="Output format [default: from -o's extension, else tree].")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Write to FILE (atomically) instead of standard output.")
@click.option("--depth", type=int, default=None, help="Show nodes down to this depth (0 = roots).")
@click.option("--top", type=int, default=None, help="Keep the N largest children of each node.")
@click.option("--sort", type=click.Choice([k.value for k in SortKey]), default="order",
              show_default=True, help="Order of siblings.")
@click.option("--step", type=int, default=None,
              help="Analyze this ProfilerStep alone [default: mean of the complete steps].")
@click.option("--hierarchy", type=click.Choice(_SOURCES), default="auto", show_default=True,
              help="Where the module tree comes from.")
@click.option("--raw", is_flag=True, help="Times as plain microseconds.")
def analyze(trace, fmt, output, depth, top, sort, step, hierarchy, raw):
    """Per-module forward and backward GPU time of TRACE (.json or .json.gz)."""
    try:
        if fmt is None:
            chosen = render.for_path(output) if output else None
            fmt = chosen.name if chosen else "tree"
        profile = analyze_api(
            trace, step=step, hierarchy=hierarchy, depth=depth, top=top, sort=sort,
            progress=_progress_reporter(trace),
        )
        text = render.render(profile, fmt, render.RenderOptions(raw_numbers=raw))
        if sys.stderr.isatty():
            click.echo("\r\033[K", err=True, nl=False)
        if output:
            write_atomic(output, text)
        else:
            click.echo(text, nl=False)
    except TraceprofError as e:
        _fail(e.message, e.exit_code)
    except MemoryError:
        _fail(f"{trace}: out of memory while analyzing", 5)
    except KeyboardInterrupt:
        _fail("interrupted", 130)


def _fail(message: str, code: int) -> None:
    click.echo(f"traceprof: error: {message}", err=True)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()

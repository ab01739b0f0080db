"""``traceprof cache info|clear``: where the cache of decoded traces and analyses is, what it
holds, and emptying it (docs/performance.md "The cache")."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from traceprof import units
from traceprof.cli.common import fail
from traceprof.errors import OutputError, TraceprofError

if TYPE_CHECKING:
    from traceprof.read.cache import Store


@click.group("cache")
def cache_command() -> None:
    """The cache of decoded traces and analyses (a second look at a trace skips its JSON)."""


def _store() -> Store:
    from traceprof.read import cache

    try:
        store = cache.Store.default()
    except TraceprofError as e:
        fail(e.message, e.exit_code)
    if store is None:
        fail(f"the cache is turned off (${cache.DIR_ENV} is {os.environ.get(cache.DIR_ENV)!r})", 3)
    return store


@cache_command.command("info")
def info() -> None:
    """Where the cache is, its entries and size, and its limit."""
    from traceprof.read import cache

    store = _store()
    store.private()  # a directory that is not used says why (a warning)
    for label, value in cache.summary(store):
        click.echo(f"{label + ':':<11}{value}")


@cache_command.command("clear")
def clear() -> None:
    """Remove every entry (traceprof's own: files of its name, owner and format only)."""
    store = _store()
    n, freed, failed = store.clear()
    if failed:
        _, error = failed[0]
        fail(
            f"{store.directory}: cannot remove {len(failed)} of {len(failed) + n} entries "
            f"({error.strerror or error}); removed {n} ({units.file_size(freed)})",
            OutputError.exit_code,
        )
    click.echo(f"removed {n} entries ({units.file_size(freed)}) from {store.directory}")

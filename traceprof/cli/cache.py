"""``traceprof cache info|clear``: where the cache of decoded traces and analyses is, what it
holds, and emptying it (docs/performance.md "The cache")."""

from __future__ import annotations

import os

import click

from traceprof import units
from traceprof.cli.common import fail
from traceprof.errors import TraceprofError
from traceprof.read import cache


@click.group("cache")
def cache_command() -> None:
    """The cache of decoded traces and analyses (a second look at a trace skips its JSON)."""


def _store() -> cache.Store:
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
    for label, value in cache.summary(_store()):
        click.echo(f"{label + ':':<11}{value}")


@cache_command.command("clear")
def clear() -> None:
    """Remove every entry."""
    store = _store()
    n, freed = store.clear()
    click.echo(f"removed {n} entries ({units.file_size(freed)}) from {store.directory}")

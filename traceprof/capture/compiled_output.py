"""The compiled-kernel table written out: the records of ``traceprof.trace.model``
(:class:`CompiledTable` and the records it holds) as a strict JSON document, each value that
cannot be written left out with its reason (:func:`table_document`, :func:`failure_table`), the
call sites of such a document (:func:`iter_call_sites`), and the row of each compiled graph kept
as a file next to Inductor's cache, for the cache hits of later processes (:func:`keep_row`,
:func:`kept_row`).

This module imports torch only to find Inductor's cache directory.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

import msgspec

from traceprof.trace.model import CompiledGraph, CompiledOmission, CompiledTable
from traceprof.trace.schema import COMPILED_TABLE_VERSION

__all__ = ["failure_table", "iter_call_sites", "keep_row", "kept_row", "table_document", "writable_graphs"]

#: characters of a value written as text, past which it is cut
MAX_TEXT = 200
_SAFE_KEY_RE = re.compile(r"[A-Za-z0-9_-]{1,200}")
#: the format of the files that keep a graph's row next to Inductor's cache
_PERSIST_FORMAT = "traceprof.compiled.graph/1"


def table_document(table: CompiledTable) -> dict[str, Any]:
    """The table as the JSON document the capture embeds (keys whose value is UNSET left out)."""
    return _strict(table)


def failure_table(reason: str, torch_version: str) -> dict[str, Any]:
    """A table without graphs that records why the real one could not be written."""
    return table_document(
        CompiledTable(
            version=COMPILED_TABLE_VERSION,
            graphs={},
            torch_version=torch_version,
            warnings=(reason,),
            omitted=(CompiledOmission(graph=None, node=None, reason=reason[:MAX_TEXT]),),
        )
    )


def iter_call_sites(table: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(table_key, call_site)`` for every call site of every graph of a table document."""
    for key, graph in table.get("graphs", {}).items():
        for site in graph.get("calls", []):
            yield key, site


def _strict(value: Any) -> Any:
    """``value`` through a strict JSON round trip (no NaN or infinity; other objects as text)."""
    builtins = msgspec.to_builtins(value, enc_hook=str, str_keys=True)
    return json.loads(json.dumps(builtins, default=str, allow_nan=False))


def writable_graphs(
    graphs: dict[str, CompiledGraph],
) -> tuple[dict[str, CompiledGraph], list[CompiledOmission]]:
    """The graphs that strict JSON can hold: a node that cannot be written is left out of its
    graph alone, a graph that cannot be written without it is left out; ``(graphs, omitted)``
    (an omission's ``node`` None: the whole graph), as the table records them
    (``docs/trace-conventions.md``)."""
    out: dict[str, CompiledGraph] = {}
    omitted: list[CompiledOmission] = []
    for key, graph in graphs.items():
        try:
            _strict(graph)
            out[key] = graph
            continue
        except Exception:  # find what cannot be written, below
            pass
        nodes = dict(graph.nodes)
        for name, node in list(nodes.items()):
            try:
                _strict(node)
            except Exception as e:
                del nodes[name]
                omitted.append(CompiledOmission(graph=str(key), node=str(name), reason=_reason(e)))
        try:
            kept = msgspec.structs.replace(graph, nodes=nodes)
            _strict(kept)
            out[key] = kept
        except Exception as e:
            omitted.append(CompiledOmission(graph=str(key), node=None, reason=_reason(e)))
    return out, omitted


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:MAX_TEXT]


def _row_path(key: str, salt: str) -> str | None:
    """Where the row of graph ``key`` is kept, next to Inductor's own cache (``None``: a key
    that is no file name)."""
    if not _SAFE_KEY_RE.fullmatch(key):
        return None
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return os.path.join(cache_dir(), "traceprof", f"compiled-{salt}", f"{key}.json")


def keep_row(key: str, salt: str, graph: CompiledGraph, root: str | None, root_class: str | None) -> None:
    """Write the row of a graph compiled for real, for cache hits of later processes (raises
    what writing raises)."""
    path = _row_path(key, salt)
    if path is None:
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    row = msgspec.to_builtins(graph, enc_hook=str, str_keys=True)
    document = {"format": _PERSIST_FORMAT, "graph": row, "root": root, "root_class": root_class}
    import tempfile  # only where a row is saved: a one-trace analysis never needs it

    fd, tmp = tempfile.mkstemp(prefix=".tmp", suffix=".json", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(document, f, default=str, separators=(",", ":"))
        os.replace(tmp, path)  # whole or not at all, also with ranks writing at once
    except BaseException:
        os.unlink(tmp)
        raise


def kept_row(key: str, salt: str) -> tuple[CompiledGraph, str | None, str | None] | None:
    """``(row, root, root_class)`` of graph ``key`` as :func:`keep_row` kept it, without its
    compile ids; ``None`` when none was kept (raises on a damaged file)."""
    path = _row_path(key, salt)
    if path is None or not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        document = json.load(f)
    if document.get("format") != _PERSIST_FORMAT:
        return None
    graph = msgspec.convert(document["graph"], CompiledGraph)
    if graph.table_key != key:
        return None
    return msgspec.structs.replace(graph, compile_ids=()), document.get("root"), document.get("root_class")

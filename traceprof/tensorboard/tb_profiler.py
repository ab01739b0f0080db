"""A copy of a trace that torch-tb-profiler 0.4.3 (TensorBoard's PyTorch Profiler tab) reads right.

That plugin was written for 2021 traces. On a newer trace it finds no kernel launches
(it knows only the ``Runtime`` category, not ``cuda_runtime``/``cuda_driver``/``hip_runtime``), so
every op and module shows zero GPU time; it takes the GPU-side ``ProfilerStep#N`` annotations for
extra steps; and it builds its Module view only from ``python_function`` ``nn.Module:`` events, so
traceprof's own module scopes are invisible to it. The copy fixes exactly these points and changes
nothing else:

- launch events of every newer runtime/driver category get the category ``Runtime``;
- ``gpu_user_annotation`` events move to a category the plugin ignores (trace viewers still
  show them);
- when the trace has traceprof module scopes, each becomes a ``python_function`` event named
  ``nn.Module: <qualified.name> (<Class>)`` with ``Python id`` / ``Python parent id`` /
  ``Python module id`` args that encode the scope nesting, and the trace's own ``nn.Module``
  events (if any) lose their ``Python module id`` so that the Module view shows one tree.

Forward -> backward flows keep their newer category ``fwdbwd``: given them as ``forward_backward``,
the plugin adds ``<module>.backward`` rows to its operator tree, but fails to load the whole run
when a module nested in another has no backward op (seen on the GPT sample).

The input file is only read. Raw spellings come from :mod:`traceprof.trace.schema`.
"""

from __future__ import annotations

import os
import zlib
from typing import Any, TypeGuard

import msgspec

from traceprof.errors import TraceReadError
from traceprof.read.nesting import without_deep_values
from traceprof.read.source import read_trace_bytes
from traceprof.trace import schema

#: a run holds the analyzed trace and this copy's decoded document at once: about twice the
#: memory of loading the trace (measured: 880 MB peak for 100 MB of JSON, analyze 470 MB)
MEMORY_SCALE = 2.0

_PYTHON_ID = schema.ARG_SPELLINGS["python_id"]
_PYTHON_PARENT_ID = schema.ARG_SPELLINGS["python_parent_id"]


class CopyStats(msgspec.Struct, frozen=True):
    """What the copy changed."""

    events: int
    launch_categories_renamed: int
    gpu_annotations_moved: int
    module_scopes_converted: int


def tb_profiler_copy(
    path: str | os.PathLike, compresslevel: int = 3, max_memory: int | str | None = None
) -> tuple[bytes, CopyStats]:
    """The gzipped JSON of a torch-tb-profiler-compatible copy of the trace at ``path``
    (``max_memory``: see :func:`traceprof.read.source.read_trace_bytes`)."""
    document = _load_document(path, max_memory)
    stats = convert_document(document)
    data = msgspec.json.encode(document)
    del document
    return gzip_in_chunks(data, compresslevel), stats


#: bytes compressed per call: a signal (Ctrl-C, SIGTERM) is handled between two calls, so it
#: waits for one chunk (milliseconds), not for the whole copy (seconds for hundreds of MB)
COMPRESS_CHUNK_BYTES = 1 << 20


def gzip_in_chunks(data: bytes, compresslevel: int = 3) -> bytes:
    """``data`` as one gzip member (no file name, mtime 0: the same bytes for the same input),
    compressed a chunk at a time so that KeyboardInterrupt can stop it between chunks."""
    compressor = zlib.compressobj(compresslevel, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    view = memoryview(data)
    parts = [
        compressor.compress(view[i : i + COMPRESS_CHUNK_BYTES])
        for i in range(0, len(data), COMPRESS_CHUNK_BYTES)
    ]
    parts.append(compressor.flush())
    return b"".join(parts)


def _load_document(path, max_memory=None) -> dict[str, Any]:
    data = read_trace_bytes(path, max_memory, memory_scale=MEMORY_SCALE)
    try:
        try:
            document = msgspec.json.decode(data)
        except RecursionError:  # values nested deeper than the decoder goes: skip unread ones
            data = without_deep_values(path, data)
            document = msgspec.json.decode(data)
    except UnicodeDecodeError:
        document = msgspec.json.decode(data.decode("utf-8", errors="replace").encode("utf-8"))
    except msgspec.DecodeError as e:
        raise TraceReadError(path, f"not valid JSON ({e})") from None
    if isinstance(document, list):
        document = {schema.TRACE_EVENTS_KEY: document}
    if not isinstance(document, dict) or not isinstance(document.get(schema.TRACE_EVENTS_KEY), list):
        raise TraceReadError(path, f'not a Kineto/Chrome trace: no "{schema.TRACE_EVENTS_KEY}" array')
    return document


def convert_document(document: dict[str, Any]) -> CopyStats:
    """Rewrite a decoded trace in place (see the module docstring); returns what changed."""
    events = [e for e in document[schema.TRACE_EVENTS_KEY] if isinstance(e, dict)]
    document[schema.TRACE_EVENTS_KEY] = events
    launches = annotations = 0
    scopes: list[dict] = []
    max_python_id = 0
    for e in events:
        # torch-tb-profiler indexes e["name"] of every event while loading
        if not isinstance(e.get("name"), str):
            e["name"] = str(e.get("name", ""))
        cat = e.get("cat")
        if not isinstance(cat, str):
            continue
        if e.get("ph") == "X":
            lower = cat.lower()
            if lower in schema.TBP_RENAMED_RUNTIME_CATEGORIES:
                e["cat"] = schema.TBP_RUNTIME_CATEGORY
                launches += 1
            elif lower == schema.GPU_USER_ANNOTATION_CATEGORY:
                e["cat"] = schema.TBP_IGNORED_GPU_ANNOTATION_CATEGORY
                annotations += 1
            elif lower == schema.PYTHON_FUNCTION_CATEGORY:
                args = e.get("args")
                if isinstance(args, dict):
                    pid = args.get(_PYTHON_ID)
                    if isinstance(pid, int) and not isinstance(pid, bool):
                        max_python_id = max(max_python_id, pid)
            if schema.TRACEPROF_SCOPE_RE.match(e["name"]) and _is_number(e.get("ts")):
                scopes.append(e)
    if scopes:
        _scopes_to_module_events(events, scopes, max_python_id + 1)
    return CopyStats(len(events), launches, annotations, len(scopes))


def _is_number(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _duration(e: dict) -> float:
    d = e.get("dur")
    return float(d) if _is_number(d) else 0.0


def _scopes_to_module_events(events: list[dict], scopes: list[dict], first_id: int) -> None:
    # the trace's own nn.Module events would form a second, competing module tree
    for e in events:
        if e.get("cat") == schema.PYTHON_FUNCTION_CATEGORY and isinstance(e.get("args"), dict):
            e["args"].pop(schema.PYTHON_MODULE_ID_ARG, None)
    by_thread: dict[tuple[str, str], list[dict]] = {}
    for e in scopes:
        by_thread.setdefault((str(e.get("pid")), str(e.get("tid"))), []).append(e)
    next_id = first_id
    module_ids: dict[str, int] = {}
    for thread_scopes in by_thread.values():
        thread_scopes.sort(key=lambda e: (e["ts"], -_duration(e)))
        stack: list[tuple[float, int]] = []  # (end, python id) of the open scopes
        for e in thread_scopes:
            start = float(e["ts"])
            while stack and start >= stack[-1][0]:
                stack.pop()
            m = schema.TRACEPROF_SCOPE_RE.match(e["name"])
            assert m is not None  # the scopes are the events it matches
            class_name, qualified = m.group(2), m.group(3).strip()
            label = f"{qualified} ({class_name})" if qualified else class_name
            args = dict(e.get("args") or {})
            args[_PYTHON_ID] = next_id
            args[_PYTHON_PARENT_ID] = stack[-1][1] if stack else -1
            # one id per module: the Module view aggregates calls by (name, module id)
            args[schema.PYTHON_MODULE_ID_ARG] = module_ids.setdefault(label, len(module_ids))
            e["cat"] = schema.PYTHON_FUNCTION_CATEGORY
            e["name"] = schema.NN_MODULE_NAME_PREFIX + label
            e["args"] = args
            stack.append((start + _duration(e), next_id))
            next_id += 1

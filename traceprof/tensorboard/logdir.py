"""Write a TensorBoard log directory: one run per trace (docs/tensorboard.md, layout.py).

Each run gets traceprof's JSON profiles (the traceprof tab), a torch-tb-profiler-compatible copy of
the trace (the PyTorch Profiler tab) and an event file with scalars and a text summary
(TensorBoard's Scalars and Text tabs). Input traces are only read. A run directory is created
fresh (``mkdir``, which fails rather than reuse an existing directory); when the name is taken,
``-2``, ``-3``, ... is appended, so writing into an existing logdir adds runs and never clobbers.
Every file is written atomically, and the run index ``run.json`` last.

The torch-tb-profiler copy is bounded: that plugin loads every trace of a logdir in a process of
its own, each holding the whole trace decoded (measured: a logdir of 200 runs made TensorBoard
start 207 processes and take 16 GB within a minute, and its exit waits for them all). By default (``tb_profiler="auto"``) a run gets its copy only while the logdir holds
fewer than :data:`MAX_TB_PROFILER_COPIES` such traces; ``"always"`` and ``"never"`` decide alone.
"""

from __future__ import annotations

import itertools
import os
import re
import time
import warnings as py_warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec
from msgspec.structs import asdict

from traceprof import render
from traceprof.api import analyze_steps
from traceprof.errors import OutputError, TraceReadError
from traceprof.output import write_atomic, write_atomic_bytes
from traceprof.read.build import load_trace
from traceprof.read.load import Progress
from traceprof.render.json_format import profile_json
from traceprof.tensorboard import events, layout
from traceprof.tensorboard.tb_profiler import MEMORY_SCALE, CopyStats
from traceprof.tensorboard.tb_profiler import tb_profiler_copy as tb_profiler_copy_of
from traceprof.trace import schema

if TYPE_CHECKING:
    from traceprof.result.model import ModuleProfile
    from traceprof.trace.columns import Trace

#: per-step profiles written per run (the first complete steps); the mean covers all of them
MAX_STEP_PROFILES = 32

#: torch-tb-profiler traces a logdir may hold before "auto" writes no more copies (module docstring)
MAX_TB_PROFILER_COPIES = 16
#: when runs get a torch-tb-profiler copy: "auto" (bounded), "always", "never"
TB_PROFILER_CHOICES = ("auto", "always", "never")

_TRACE_SUFFIXES = (".json", ".json.gz")
_UNSAFE = re.compile(r"[^A-Za-z0-9._+=@,-]+")


class RunInfo(msgspec.Struct, frozen=True):
    """One run written into a logdir."""

    name: str  # run name: its directory relative to the logdir, with '/'
    path: str  # the run directory
    trace_path: str  # the input trace
    steps: tuple[int, ...]  # ProfilerSteps the mean profile covers
    step_profiles: tuple[int, ...]  # steps with a profile of their own
    tb_profiler_copy: str | None  # file name of the torch-tb-profiler copy in the run directory
    copy_stats: CopyStats | None  # None: the run has no copy (tb_profiler, MAX_TB_PROFILER_COPIES)


def collect_traces(inputs: Sequence[str | os.PathLike]) -> list[str]:
    """Trace files named by ``inputs``: files as given; directories searched recursively.

    In a directory, ``*.pt.trace.json[.gz]`` files are taken when there are any (the names the
    PyTorch profiler's trace handler writes), else every ``*.json[.gz]`` file. Runs written by
    traceprof (directories holding ``plugins/traceprof/run.json``) are skipped.
    """
    found: list[str] = []
    for item in inputs:
        path = os.fspath(item)
        if os.path.isdir(path):
            files = _trace_files_in(path)
            if not files:
                raise TraceReadError(path, "no .json or .json.gz trace files in this directory")
            found.extend(files)
        elif os.path.exists(path):
            found.append(path)
        else:
            raise TraceReadError(path, "no such file or directory")
    seen: set[str] = set()
    unique = []
    for f in found:
        key = os.path.realpath(f)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique


def _trace_files_in(directory: str) -> list[str]:
    files: list[str] = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if layout.is_run_dir(root):
            dirs[:] = []
            continue
        files.extend(
            os.path.join(root, n)
            for n in sorted(names)
            if not n.startswith(".") and n.lower().endswith(_TRACE_SUFFIXES)
        )
    profiler_files = [f for f in files if schema.TBP_WORKER_FILE_RE.match(os.path.basename(f))]
    return profiler_files or files


def default_run_name(trace_path: str) -> str:
    """The run name of a trace: its file name without ``.json``/``.json.gz``/``.pt.trace``."""
    base = os.path.basename(os.fspath(trace_path))
    for suffix in (".gz", ".json", ".pt.trace"):
        if base.lower().endswith(suffix):
            base = base[: -len(suffix)]
    return _safe_component(base)


def _safe_component(text: str) -> str:
    text = _UNSAFE.sub("_", text).lstrip(".")
    return text or "run"


def _split_name(name: str) -> list[str]:
    parts = [p for p in name.replace("\\", "/").split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise OutputError(f"{name!r}: not a usable run name")
    return [_safe_component(p) for p in parts]


def reserve_run_dir(logdir: str, name: str) -> tuple[str, str]:
    """Create a new, empty run directory; ``(run name, directory)``. Never reuses a directory."""
    parts = _split_name(name)
    parent = os.path.join(logdir, *parts[:-1])
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{parent}: cannot create the directory ({e.strerror or e})") from None
    for i in itertools.count(1):
        leaf = parts[-1] if i == 1 else f"{parts[-1]}-{i}"
        path = os.path.join(parent, leaf)
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        except OSError as e:
            raise OutputError(f"{path}: cannot create the run directory ({e.strerror or e})") from None
        return "/".join(parts[:-1] + [leaf]), path
    raise AssertionError("unreachable")  # pragma: no cover


def _worker_name(trace_path: str, stem: str, rank: int | None, world_size: int | None) -> str:
    base = os.path.basename(trace_path)
    m = schema.TBP_WORKER_FILE_RE.match(base)
    worker = m.group(1) if m and m.group(1) else stem
    if rank is not None and (world_size or 0) > 1 and not m:
        worker = f"{worker}_rank{rank}"
    # no dots: torch-tb-profiler would read ".<digits>" as a span
    return _safe_component(worker).replace(".", "_")


def write_logdir(
    inputs: Sequence[str | os.PathLike],
    logdir: str | os.PathLike,
    *,
    name: str | None = None,
    hierarchy: str | None = None,
    peak_flops: float | None = None,
    max_step_profiles: int = MAX_STEP_PROFILES,
    progress: Progress | None = None,
    max_memory: int | str | None = None,
    tb_profiler: str = "auto",
    warnings: list[str] | None = None,
) -> list[RunInfo]:
    """Write one run per trace named by ``inputs`` (files or directories) into ``logdir``.

    ``name`` names the run of a single trace, or is the parent of the runs of several traces
    (``NAME/<file name>``). ``peak_flops`` (FLOP/s of one device) enables the MFU scalar.
    ``max_memory``: the memory limit of loading each trace (see :func:`traceprof.load_trace`).
    ``tb_profiler``: which runs get a torch-tb-profiler copy (:data:`TB_PROFILER_CHOICES`, the
    module docstring); runs left without one are counted in a line appended to ``warnings``.
    """
    if tb_profiler not in TB_PROFILER_CHOICES:
        raise ValueError(f"tb_profiler={tb_profiler!r}: not one of {', '.join(TB_PROFILER_CHOICES)}")
    traces = collect_traces(inputs)
    events.require_tensorboard()
    logdir = os.fspath(logdir)
    try:
        os.makedirs(logdir, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{logdir}: cannot create the log directory ({e.strerror or e})") from None
    runs = []
    results: list = []  # per run, what a job needs (traceprof.job.RankResult)
    copies = count_tb_profiler_traces(logdir) if tb_profiler == "auto" else 0
    for path in traces:
        if name is None:
            run_name = default_run_name(path)
        elif len(traces) == 1:
            run_name = name
        else:
            run_name = f"{name}/{default_run_name(path)}"
        runs.append(
            write_run(
                path,
                logdir,
                run_name,
                hierarchy=hierarchy,
                peak_flops=peak_flops,
                max_step_profiles=max_step_profiles,
                progress=progress,
                max_memory=max_memory,
                results=results,
                tb_profiler_copy=tb_profiler == "always"
                or (tb_profiler == "auto" and copies < MAX_TB_PROFILER_COPIES),
            )
        )
        copies += runs[-1].tb_profiler_copy is not None
    skipped = sum(r.tb_profiler_copy is None for r in runs)
    if tb_profiler == "auto" and skipped:
        _warn(
            warnings,
            f"{skipped} of {len(runs)} runs written without a copy for the PyTorch Profiler tab: "
            f"the log directory holds {MAX_TB_PROFILER_COPIES} or more torch-tb-profiler traces, and "
            "TensorBoard loads each in a process of its own (--tb-profiler always writes them; "
            "docs/tensorboard.md)",
        )
    if len(runs) > 1:
        _write_job(runs, results)
    return runs


class TensorBoardWarning(UserWarning):
    """Something a logdir was written without (a run's torch-tb-profiler copy)."""


def _warn(out: list[str] | None, message: str) -> None:
    """``message`` appended to ``out``, or a :class:`TensorBoardWarning` without a list."""
    if out is not None:
        out.append(message)
    else:
        py_warnings.warn(message, TensorBoardWarning, stacklevel=3)


def count_tb_profiler_traces(logdir: str) -> int:
    """The trace files under ``logdir`` that torch-tb-profiler loads (``*.pt.trace.json[.gz]``),
    traceprof's copies and any other; hidden directories are skipped, as TensorBoard does."""
    found = 0
    for _root, dirs, files in os.walk(logdir):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found += sum(1 for f in files if schema.TBP_WORKER_FILE_RE.match(f))
    return found


def _write_job(runs: list[RunInfo], results: list) -> None:
    """When the runs are the ranks of one job: the job's document in every run (layout.JOB_FILE),
    for the tab's rank x module heat map. Traces that are not one job get none."""
    from traceprof.errors import JobError
    from traceprof.job.records import job_document
    from traceprof.job.reduce import reduce_job

    try:
        job = reduce_job(results)
    except JobError:
        return
    run_of = {r.trace_path: r.name for r in runs}
    doc = job_document(job)
    doc["runs"] = {str(jr.rank): run_of[jr.path] for jr in job.ranks}
    text = _json_bytes(doc)
    for run in runs:
        write_atomic_bytes(os.path.join(run.path, layout.PLUGIN_DIR, layout.JOB_FILE), text)


def _json_bytes(obj) -> bytes:
    return msgspec.json.format(msgspec.json.encode(obj), indent=1) + b"\n"


def write_run(
    trace_path: str,
    logdir: str,
    run_name: str,
    *,
    hierarchy: str | None = None,
    peak_flops: float | None = None,
    max_step_profiles: int = MAX_STEP_PROFILES,
    progress: Progress | None = None,
    max_memory: int | str | None = None,
    results: list | None = None,
    tb_profiler_copy: bool = True,
) -> RunInfo:
    """Analyze one trace and write it as a new run (named ``run_name`` or a free variant).
    ``results``: a list to append the trace's :class:`~traceprof.job.RankResult` to (jobs).
    ``tb_profiler_copy``: whether the run gets a copy of the trace for torch-tb-profiler."""
    events.require_tensorboard()
    trace = load_trace(trace_path, progress, max_memory, memory_scale=MEMORY_SCALE)
    profile, step_profiles = _profiles(trace, trace_path, hierarchy, max_step_profiles, progress)
    numbers = profile.selection.numbers
    docs = _documents(profile, step_profiles)
    copy: tuple[bytes, CopyStats] | None = None
    if tb_profiler_copy:
        if progress:
            progress(f"{trace_path}: copying for torch-tb-profiler")
        copy = tb_profiler_copy_of(trace_path, max_memory=max_memory)

    run_name, run_dir = reserve_run_dir(logdir, run_name)
    if progress:
        progress(f"{trace_path}: writing run {run_name}")
    md = profile.metadata
    worker = _worker_name(trace_path, default_run_name(trace_path), md.rank, md.world_size)
    copy_name = worker + schema.TBP_TRACE_FILE_SUFFIX if copy else None
    if copy and copy_name:
        write_atomic_bytes(os.path.join(run_dir, copy_name), copy[0])
    _write_profiles(run_dir, docs)

    points = events.scalars(docs.mean_doc, docs.step_docs, peak_flops)
    tree_text = render.render(profile, "tree")
    assert isinstance(tree_text, str)  # a text format
    events.write_event_file(run_dir, points, docs.step_docs[0][0], tree_text)

    tb_profiler = {"trace_copy": copy_name, "worker": worker, **asdict(copy[1])} if copy else None
    index = _run_index(run_name, trace_path, profile, docs, points, peak_flops, tb_profiler)
    write_atomic_bytes(layout.run_index_path(run_dir), _json_bytes(index))
    if results is not None:
        from traceprof.analysis.job_timeline import step_timelines
        from traceprof.job.rank import RankResult

        results.append(RankResult(os.fspath(trace_path), profile, step_timelines(trace)))
    return RunInfo(
        run_name,
        run_dir,
        os.fspath(trace_path),
        tuple(numbers),
        tuple(n for n, _ in docs.step_texts),
        copy_name,
        copy[1] if copy else None,
    )


def _profiles(
    trace: Trace,
    trace_path: str,
    hierarchy: str | None,
    max_step_profiles: int,
    progress: Progress | None,
) -> tuple[ModuleProfile, list[tuple[int, ModuleProfile]]]:
    """The mean profile, and the profiles of its first ``max_step_profiles`` steps (none for a
    mean of one step)."""
    if progress:
        progress(f"{trace_path}: attributing")
    # the mean first: which steps it is the mean of decides the per-step profiles
    (profile,) = analyze_steps(trace, [None], hierarchy=hierarchy)
    numbers = profile.selection.numbers
    step_profiles = []
    if len(numbers) > 1:
        if progress:
            progress(f"{trace_path}: {min(len(numbers), max_step_profiles)} steps")
        chosen = list(numbers[:max_step_profiles])
        step_profiles = list(zip(chosen, analyze_steps(trace, chosen, hierarchy=hierarchy)))
    return profile, step_profiles


class _Documents(NamedTuple):
    """The run's profile documents: the mean's and each step's, as JSON text and decoded;
    ``step_docs`` is the mean's alone (as its first step's) when no step has a profile."""

    mean_text: str
    mean_doc: dict
    step_texts: list[tuple[int, str]]
    step_docs: list[tuple[int, dict]]


def _documents(profile: ModuleProfile, step_profiles: list[tuple[int, ModuleProfile]]) -> _Documents:
    """The tab's documents; they carry the timeline of a step (the mean: of its first step)."""
    numbers = profile.selection.numbers
    mean_text = profile_json(profile, timeline=True)
    mean_doc = msgspec.json.decode(mean_text)
    step_texts = [(n, profile_json(p, timeline=True)) for n, p in step_profiles]
    if step_texts:
        step_docs = [(n, msgspec.json.decode(t)) for n, t in step_texts]
    else:
        step_docs = [(numbers[0] if numbers else 0, mean_doc)]
    return _Documents(mean_text, mean_doc, step_texts, step_docs)


def _write_profiles(run_dir: str, docs: _Documents) -> None:
    """The profile documents, into the run's plugin directory."""
    plugin_dir = os.path.join(run_dir, layout.PLUGIN_DIR)
    try:
        os.makedirs(plugin_dir, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{plugin_dir}: cannot create the directory ({e.strerror or e})") from None
    write_atomic(os.path.join(plugin_dir, layout.MEAN_PROFILE), docs.mean_text)
    for n, text in docs.step_texts:
        write_atomic(os.path.join(plugin_dir, layout.step_profile_name(n)), text)


def _run_index(
    run_name: str,
    trace_path: str,
    profile: ModuleProfile,
    docs: _Documents,
    points: list[events.Scalar],
    peak_flops: float | None,
    tb_profiler: dict[str, Any] | None,
) -> dict[str, Any]:
    """The run's index (layout.RUN_SCHEMA); ``tb_profiler``: its torch-tb-profiler copy's entry."""
    from traceprof.version import __version__

    md = profile.metadata
    numbers = profile.selection.numbers
    step_texts = docs.step_texts
    return {
        "schema": layout.RUN_SCHEMA,
        "run": run_name,
        "traceprof_version": __version__,
        "created_unix_s": time.time(),
        "trace": {
            "path": os.path.abspath(trace_path),
            "size_bytes": md.size_bytes,
            "devices": sorted({d.name for d in md.devices if d.name}),
            "rank": md.rank,
            "world_size": md.world_size,
        },
        "hierarchy": {"source": profile.source, "description": profile.source_description},
        "has_gpu": profile.has_gpu,
        "mean_of_steps": list(numbers),
        "profiles": {"mean": layout.MEAN_PROFILE},
        "steps": [{"step": n, "profile": layout.step_profile_name(n)} for n, _ in step_texts],
        "steps_without_profile": list(numbers[len(step_texts) :]) if step_texts else [],
        "scalars": sorted({p.tag for p in points}),
        "per_step": events.per_step_table(points),
        "peak_flops": peak_flops,
        "tb_profiler": tb_profiler,
    }

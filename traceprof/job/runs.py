"""Which of a job's traces make one run: the traces' ranks and world sizes, their runs (world
size, model, capture window), and the error or note when several runs are given."""

from __future__ import annotations

import os

import msgspec

from traceprof import units
from traceprof.errors import JobError
from traceprof.job.rank import RankResult
from traceprof.result.model import NodeKind
from traceprof.trace import schema

#: in the warning of a directory of several runs, of which the newest was analyzed
RUNS_NOTE = "runs in the directory: analyzed the newest"


def _rank_of(result: RankResult) -> int | None:
    md = result.profile.metadata
    rank = md.rank if md.rank is not None else (md.module_table.rank if md.module_table else None)
    if rank is None:
        m = schema.RANK_IN_FILE_NAME_RE.search(os.path.basename(result.path))
        rank = int(m.group(1)) if m else None
    return rank


def _world_size_of(result: RankResult) -> int | None:
    md = result.profile.metadata
    if md.world_size is not None:
        return md.world_size
    return md.module_table.world_size if md.module_table else None


def _job_name(path: str) -> str:
    return schema.JOB_FILE_NAME_VARYING_RE.sub("", os.path.basename(path))


def _names(paths, limit: int = 3) -> str:
    paths = list(paths)
    shown = ", ".join(os.path.basename(p) for p in paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def numbers_text(values) -> str:
    return ", ".join(map(str, values)) or "none"


#: the largest world size a trace may claim: above any job run so far (about 10**5 GPUs), and
#: what keeps a corrupt ``world_size`` from sizing anything the job builds
MAX_WORLD_SIZE = 2**20


def _checked_world_size(result: RankResult) -> int | None:
    """The world size of a rank's trace, refused when it is not one a job can have."""
    size = _world_size_of(result)
    if size is not None and not 1 <= size <= MAX_WORLD_SIZE:
        raise JobError(
            f"{result.path}: world size {size} in the trace is not that of a job "
            f"(1 to {MAX_WORLD_SIZE}); the trace's distributedInfo is damaged"
        )
    return size


def missing_ranks(given: list[int], world_size: int) -> tuple[int, ...]:
    """The ranks below ``world_size`` not in ``given`` (checked sizes only: see
    :data:`MAX_WORLD_SIZE`)."""
    have = set(given)
    return tuple(r for r in range(world_size) if r not in have)


def _root_classes(result: RankResult) -> tuple[str, ...]:
    """The classes of the module tree's roots (the model a rank ran)."""
    profile = result.profile
    return tuple(
        profile.nodes[i].class_name or profile.nodes[i].name
        for i in profile.roots
        if profile.nodes[i].kind is NodeKind.MODULE
    )


def _written_at(result: RankResult) -> float:
    """When the trace was written (its file's time), to tell capture windows apart."""
    try:
        return os.stat(result.path).st_mtime
    except OSError:
        return 0.0


class _Run(msgspec.Struct):
    """The traces of one job's capture window: same world size (or none) and model, each rank
    once."""

    world_size: int | None
    roots: tuple[str, ...]
    results: list[RankResult]

    @property
    def newest(self) -> float:
        return max(_written_at(r) for r in self.results)

    def describe(self) -> str:
        ranks = sorted(r for r in map(_rank_of, self.results) if r is not None)
        what = f"rank{'s' if len(ranks) != 1 else ''} {numbers_text(ranks)}" if ranks else "no rank"
        size = f"world size {self.world_size}" if self.world_size is not None else "no world size"
        model = "/".join(self.roots) or "no module tree"
        return f"{_names(r.path for r in self.results)} ({what}, {size}, model {model})"


def _runs(results: list[RankResult]) -> list[_Run]:
    """``results`` in runs: by world size and model (the classes of the module tree's roots),
    then by capture window: a rank met a second time starts the next window (oldest file
    first). In the order of their first trace."""
    sizes = {r.path: _checked_world_size(r) for r in results}
    known = set(sizes.values()) - {None}
    only = next(iter(known)) if len(known) == 1 else None  # that of traces without one, too
    groups: dict[tuple[int | None, tuple[str, ...]], list[RankResult]] = {}
    for r in results:
        size = sizes[r.path]
        groups.setdefault((only if size is None else size, _root_classes(r)), []).append(r)
    runs = []
    for (size, roots), members in groups.items():
        by_rank: dict[int | None, list[RankResult]] = {}
        for r in sorted(members, key=lambda r: (_written_at(r), r.path)):
            by_rank.setdefault(_rank_of(r) if len(members) > 1 else 0, []).append(r)
        windows = max(len(v) for v in by_rank.values())
        for i in range(windows):
            window = [items[i] for items in by_rank.values() if i < len(items)]
            order = {id(r): n for n, r in enumerate(members)}
            runs.append(_Run(size, roots, sorted(window, key=lambda r: order[id(r)])))
    return runs


def _runs_text(runs: list[_Run], limit: int = 3) -> str:
    shown = "; ".join(run.describe() for run in runs[:limit])
    return shown + (f"; and {units.counted(len(runs) - limit, 'more run')}" if len(runs) > limit else "")


def one_run(results: list[RankResult], newest: bool) -> tuple[list[RankResult], list[str]]:
    """The traces of one run of ``results``, and a note when others were left out (``newest``:
    the newest run of a directory), else a JobError naming the runs and what differs."""
    runs = _runs(results)
    if len(runs) == 1 or (not newest and any(_rank_of(r) is None for r in results)):
        return results, []  # one run, or traces without ranks: check_one_job names one
    if newest:
        chosen = max(runs, key=lambda run: run.newest)
        others = _runs_text([run for run in runs if run is not chosen])
        return chosen.results, [
            f"{len(runs)} {RUNS_NOTE}, {chosen.describe()}; "
            f"left out: {others} (give a run's files, or its own directory, to analyze it)"
        ]
    differs = [
        what
        for what, values in (
            ("world sizes", {run.world_size for run in runs}),
            ("models", {run.roots for run in runs}),
            ("file names", {frozenset(_job_name(r.path) for r in run.results) for run in runs}),
        )
        if len(values) > 1
    ]
    parts = _runs_text(runs)
    pick = "(one run's files, or its own directory)"
    if not differs:  # one job, captured in several windows
        ranks = [rank for r in runs[1].results if (rank := _rank_of(r)) is not None]
        raise JobError(
            f"rank {numbers_text(ranks[:1])} given twice (several capture windows): {parts}; "
            f"give the traces of one window {pick}"
        )
    raise JobError(
        f"ranks of different jobs mixed ({' and '.join(differs)} differ): {parts}; "
        f"give the traces of one job {pick}"
    )


def check_one_job(results: list[RankResult]) -> tuple[list[tuple[int, RankResult]], int | None]:
    """The ranks of ``results``, sorted; a JobError when they are not the ranks of one job."""
    if len(results) == 1:
        rank = _rank_of(results[0])
        return [(rank if rank is not None else 0, results[0])], _world_size_of(results[0])
    ranked = []
    for r in results:
        rank = _rank_of(r)
        if rank is None:
            raise JobError(
                f"{r.path}: no rank: the trace has no distributedInfo and its file "
                "name no rank number (rank3, worker_3)"
            )
        ranked.append((rank, r))
    # one run (one_run): one world size, each rank once
    world_size = next((s for r in results if (s := _checked_world_size(r)) is not None), None)
    for rank, r in ranked:
        if world_size is not None and not 0 <= rank < world_size:
            raise JobError(f"{r.path}: rank {rank} is outside the world size {world_size}")
    ranked.sort(key=lambda t: t[0])
    return ranked, world_size

"""A distributed job: the traces of its ranks, analyzed one by one (in parallel, by an engine) and
reduced into one result, per module x rank x pass.

The single-trace pipeline is used as it is: each rank's trace becomes a
:class:`~traceprof.result.model.ModuleProfile` plus its GPU timeline per step
(:mod:`traceprof.analysis.job_timeline`) in :func:`~traceprof.job.rank.analyze_rank`, which is what
an engine runs and sends back (a few hundred kB at most; never events).
:func:`~traceprof.job.reduce.reduce_job` then matches the ranks (by ``distributedInfo`` or the file
names), checks they make one job with the same steps (:mod:`traceprof.job.runs`), and builds the
:class:`~traceprof.job.model.Job`: per module the time of every rank, with min / median / max /
spread, the slowest rank and the imbalance (max / median), and the stragglers. Ranks are sorted
by number before anything is computed, so the result does not depend on which engine ran the
analyses or in which order they finished. :func:`analyze_job` runs the whole of it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from traceprof.job.model import Job
from traceprof.job.rank import RankOptions, rank_results
from traceprof.job.reduce import DEFAULT_STRAGGLER_THRESHOLD, reduce_job
from traceprof.read.discovery import find_traces
from traceprof.read.limits import job_memory_share
from traceprof.result import shaping
from traceprof.result.shaping import SortKey

if TYPE_CHECKING:
    from collections.abc import Sequence

    from traceprof.engine import Engine
    from traceprof.progress import Progress
    from traceprof.result.sources import Source


def analyze_job(
    paths: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    step: int | None = None,
    hierarchy: Source | str | None = None,
    peak_tflops: float | None = None,
    max_memory: int | str | None = None,
    engine: str | Engine | None = None,
    jobs: int | None = None,
    scheduler: str | None = None,
    scheduler_timeout: float | None = None,
    straggler_threshold: float = DEFAULT_STRAGGLER_THRESHOLD,
    progress: Progress | None = None,
    cache: bool | None = None,
    newest_run: bool | None = None,
    depth: int | None = None,
    top: int | None = None,
    sort: SortKey | str = SortKey.ORDER,
    ignore: tuple[str, ...] | list[str] = (),
) -> Job:
    """Analyze the traces of a distributed job (files, directories, glob patterns) and reduce
    them into a :class:`Job`. ``engine``: ``"local"`` (a process pool of ``jobs`` workers,
    default: all CPUs), ``"dask"`` (``scheduler`` ``tcp://HOST:PORT``, else a LocalCluster;
    ``scheduler_timeout``: seconds to wait for it and a first worker, default 30), or
    an object with the :class:`~traceprof.engine.Engine` interface. ``progress``: called as each
    trace is done (:data:`traceprof.progress.Progress`; a callback of three parameters is called
    as before, ``progress(done, total, path)``). ``cache``: each worker reads and writes its
    ranks' results in the cache of its machine (default: unless ``$TRACEPROF_CACHE`` is ``off``).
    ``newest_run``: traces of several runs give the newest run's report, with a warning naming
    the others, instead of an error (default: when ``paths`` is one directory). ``max_memory``
    (default: ``$TRACEPROF_MAX_MEMORY``, else 80% of the available memory) is the job's: divided
    among the traces loaded at once on this machine (docs/jobs.md). ``depth``, ``top``,
    ``sort``, ``ignore``: the modules shaped as ``traceprof analyze`` shapes them
    (:meth:`Job.shaped`).

    >>> job = analyze_job("runs/exp1/")  # doctest: +SKIP
    >>> df = job.to_dataframe()  # doctest: +SKIP
    >>> df.pivot_table(index="module", columns="rank", values="gpu_busy_us")  # doctest: +SKIP
    """
    from traceprof import options as checked
    from traceprof.engine import make_engine
    from traceprof.progress import per_item

    # checked and made plain int and float once, as the command line does (numpy.int64(2) is 2)
    step = checked.argument("step", step, int, min=0)
    depth = checked.argument("depth", depth, int, min=0)
    top = checked.argument("top", top, int, min=1)
    jobs = checked.argument("jobs", jobs, int, min=1)
    peak_tflops = checked.argument("peak_tflops", peak_tflops, float, min=0, min_open=True)
    scheduler_timeout = checked.argument("scheduler_timeout", scheduler_timeout, float, min=0, min_open=True)
    straggler_threshold = checked.argument("straggler_threshold", straggler_threshold, float, min=0) or 0.0
    if newest_run is None:
        newest_run = isinstance(paths, (str, os.PathLike)) and os.path.isdir(paths)
    paths = find_traces(paths)
    if engine is None or isinstance(engine, str):
        engine = make_engine(
            engine or "local", jobs=jobs, scheduler=scheduler, scheduler_timeout=scheduler_timeout
        )
    at_once = _traces_at_once(engine, len(paths))
    options = RankOptions(
        step=step,
        hierarchy=hierarchy,
        peak_tflops=peak_tflops,
        max_memory=max_memory if at_once is None else job_memory_share(max_memory, at_once),
        cache=cache,
        sharing=at_once or 1,
    )
    if depth is not None or top is not None or sort != SortKey.ORDER or ignore:
        shaping.check_shape(depth, top, sort)  # before any trace is read
    results = rank_results(engine, paths, options, per_item(progress))
    job = reduce_job(
        results,
        straggler_threshold=straggler_threshold,
        engine=getattr(engine, "name", "local"),
        newest_run=newest_run,
    )
    if depth is None and top is None and sort == SortKey.ORDER and not ignore:
        return job
    return job.shaped(depth=depth, top=top, sort=sort, ignore=ignore)


def _traces_at_once(engine: Any, traces: int) -> int | None:
    """How many traces ``engine`` loads at once on this machine: its workers (``jobs``), at
    most one per trace; None when they run elsewhere (a Dask scheduler's machines), where each
    worker's limit is that machine's own."""
    if getattr(engine, "scheduler", None) is not None:
        return None
    from traceprof.engine import default_jobs

    return max(min(getattr(engine, "jobs", None) or default_jobs(), traces), 1)

"""Engines: where the per-trace analyses of a job run. One small interface,
``map(fn, items, progress) -> results`` (in the order of ``items``), and two implementations:

- :class:`LocalEngine`: a process pool on this machine (``--jobs N``; 1 runs in this process);
  each worker holds one trace at a time, so at most N traces are in memory at once;
- :class:`DaskEngine`: a Dask distributed cluster (``--engine dask``; ``--scheduler
  tcp://HOST:PORT``, else a ``LocalCluster``); each worker reads its traces where they are and
  sends back only ``fn``'s result.

``fn`` must be a module-level function and its results small and picklable (a job sends a
:class:`~traceprof.job.RankResult`, never events). Results come back in item order whichever
engine ran them, so what is computed from them is identical bit for bit.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

from traceprof.errors import MissingDependencyError, OptionError

if TYPE_CHECKING:
    from concurrent.futures import Future
    from multiprocessing.context import BaseContext

T = TypeVar("T")
R = TypeVar("R")
#: called after each item is done: (items done, items in all, the item just done)
MapProgress = Callable[[int, int, object], None]


class Engine(Protocol):
    name: str

    def map(
        self, fn: Callable[[T], R], items: Sequence[T], progress: MapProgress | None = None
    ) -> list[R]: ...


def default_jobs() -> int:
    """Worker processes by default: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class LocalEngine:
    """A pool of ``jobs`` worker processes on this machine (``jobs=1``: in this process)."""

    name = "local"

    def __init__(self, jobs: int | None = None) -> None:
        self.jobs = jobs or default_jobs()

    def map(self, fn: Callable[[T], R], items: Sequence[T], progress: MapProgress | None = None) -> list[R]:
        items = list(items)
        results: list[R | None] = [None] * len(items)
        workers = min(self.jobs, len(items))
        if workers <= 1:
            for i, item in enumerate(items):
                results[i] = fn(item)
                if progress:
                    progress(i + 1, len(items), item)
            return cast("list[R]", results)  # every item's result
        import multiprocessing
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        # never more tasks queued than workers: a worker takes the next trace when it is done
        context: BaseContext
        if os.name == "posix":
            # workers are forked from a server that has imported the analysis once: they start
            # at once and share its pages (libraries, module code)
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload([getattr(fn, "__module__", "traceprof.job.analyze")])
        else:  # pragma: no cover
            context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            pending: dict[Future[R], int] = {}
            queue = iter(enumerate(items))
            done = 0

            def submit() -> None:
                for i, item in queue:
                    pending[pool.submit(fn, item)] = i
                    return

            for _ in range(workers):
                submit()
            try:
                while pending:
                    finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for future in sorted(finished, key=pending.__getitem__):
                        i = pending.pop(future)
                        results[i] = future.result()
                        done += 1
                        if progress:
                            progress(done, len(items), items[i])
                        submit()
            except BaseException:
                for future in pending:
                    future.cancel()
                raise
        return cast("list[R]", results)  # every item's result


class DaskEngine:
    """A Dask distributed cluster: the one at ``scheduler`` (``tcp://HOST:PORT``), else a new
    ``LocalCluster`` of ``jobs`` worker processes (one thread each) for this call."""

    name = "dask"

    def __init__(self, scheduler: str | None = None, jobs: int | None = None) -> None:
        try:
            import distributed  # noqa: F401
        except ImportError:
            raise MissingDependencyError(
                "--engine dask needs Dask distributed: pip install 'traceprof[dask]'"
            ) from None
        self.scheduler = scheduler
        self.jobs = jobs

    def map(self, fn: Callable[[T], R], items: Sequence[T], progress: MapProgress | None = None) -> list[R]:
        from distributed import Client, LocalCluster, as_completed

        items = list(items)
        cluster = None
        if self.scheduler:
            client = Client(self.scheduler, timeout="30s")
        else:
            import logging

            import dask

            # Workers forked from this process, which has imported the analysis already: spawned
            # ones (Dask's default) start a fresh interpreter each and took about 0.5 s more per
            # trace (16 ranks of 50 MB: 16.6 s against 8.6 s for the local pool; forked: see
            # docs/jobs.md). A trace's error reaches the command as its one-line message, not as
            # the workers' log of the failed task.
            method = "fork" if os.name == "posix" else "spawn"
            with dask.config.set({"distributed.worker.multiprocessing-method": method}):
                cluster = LocalCluster(
                    n_workers=self.jobs or default_jobs(),
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    silence_logs=logging.CRITICAL,
                )
            client = Client(cluster)
        try:
            # pure=False: every item is analyzed, even two equal paths
            futures = client.map(fn, items, pure=False)
            index = {f.key: i for i, f in enumerate(futures)}
            results: list[R | None] = [None] * len(items)
            done = 0
            for future in as_completed(futures):
                i = index[future.key]
                results[i] = future.result()
                future.release()
                done += 1
                if progress:
                    progress(done, len(items), items[i])
            return cast("list[R]", results)  # every item's result
        finally:
            client.close()
            if cluster is not None:
                cluster.close()


ENGINES = ("local", "dask")


def make_engine(name: str = "local", jobs: int | None = None, scheduler: str | None = None) -> Engine:
    """The engine called ``name`` (``local`` or ``dask``)."""
    if jobs is not None and jobs < 1:
        raise OptionError(f"--jobs must be 1 or more, not {jobs}")
    if name == "local":
        if scheduler:
            raise OptionError("--scheduler applies to --engine dask")
        return LocalEngine(jobs)
    if name == "dask":
        return DaskEngine(scheduler, jobs)
    raise OptionError(f"unknown engine {name!r} (known: {', '.join(ENGINES)})")

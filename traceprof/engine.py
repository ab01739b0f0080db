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
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from traceprof.errors import MissingDependencyError, OptionError, TraceprofError
from traceprof.progress import ItemProgress

if TYPE_CHECKING:
    from concurrent.futures import Future
    from multiprocessing.context import BaseContext
    from multiprocessing.process import BaseProcess

T = TypeVar("T")
R = TypeVar("R")
#: called after each item is done: (items done, items in all, the item just done)
MapProgress = ItemProgress


class Engine(Protocol):
    name: str

    def map(
        self, fn: Callable[[T], R], items: Sequence[T], progress: MapProgress | None = None
    ) -> list[R]: ...


class EngineWarning(UserWarning):
    """What an engine says about its workers (more than the CPUs); the command prints it as
    ``traceprof: warning: ...``."""


class WorkerLostError(TraceprofError):
    """A worker process ended while it held an item (killed: out of memory, or a signal)."""

    exit_code = 7


def item_name(item: object) -> str:
    """How an error names an item: its path (the first field of a task tuple)."""
    return str(item[0] if isinstance(item, tuple) and item else item)


def cpu_count() -> int:
    """The CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def default_jobs() -> int:
    """Worker processes by default: the CPUs this process may use."""
    return cpu_count()


def worker_count(jobs: int, items: int) -> int:
    """The workers that ``jobs`` gives for ``items`` items: never more than the items (a worker
    without an item costs a process and its memory for nothing); a warning above the CPUs."""
    workers = min(jobs, items)
    cpus = cpu_count()
    if workers > cpus:
        warnings.warn(
            f"--jobs {jobs}: {workers} workers on {cpus} CPUs compete for them and each holds a "
            f"trace in memory; --jobs {cpus} or fewer is usually faster",
            EngineWarning,
            stacklevel=3,
        )
    return workers


class LocalEngine:
    """A pool of ``jobs`` worker processes on this machine (``jobs=1``: in this process)."""

    name = "local"

    def __init__(self, jobs: int | None = None) -> None:
        self.jobs = jobs or default_jobs()

    def map(self, fn: Callable[[T], R], items: Sequence[T], progress: MapProgress | None = None) -> list[R]:
        items = list(items)
        results: list[R | None] = [None] * len(items)
        workers = worker_count(self.jobs, len(items)) if items else 0
        if workers <= 1:
            for i, item in enumerate(items):
                results[i] = fn(item)
                if progress:
                    progress(i + 1, len(items), item)
            return cast("list[R]", results)  # every item's result
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
        from concurrent.futures.process import BrokenProcessPool

        context = pool_context(fn)
        # the pid of the worker that took each item: names the item of a worker that dies
        started = context.Array("q", len(items), lock=False)
        pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=context, initializer=_init_worker, initargs=(started,)
        )
        finished_cleanly = False
        try:
            # never more tasks queued than workers: a worker takes the next trace when it is done
            pending: dict[Future[R], int] = {}
            queue = iter(enumerate(items))
            done = 0

            def submit() -> None:
                for i, item in queue:
                    pending[pool.submit(_run_item, fn, i, item)] = i
                    return

            processes: dict[int, BaseProcess] = {}
            try:
                try:
                    for _ in range(workers):
                        submit()
                    processes = getattr(pool, "_processes", None) or {}  # by pid, as they start
                    while pending:
                        finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                        for future in sorted(finished, key=pending.__getitem__):
                            i = pending[future]
                            results[i] = future.result()
                            del pending[future]
                            done += 1
                            if progress:
                                progress(done, len(items), items[i])
                            submit()
                except BrokenProcessPool:
                    pool.shutdown(wait=True)  # every worker has ended
                    raise _lost_worker(items, sorted(pending.values()), started, processes) from None
            except BaseException:
                # an error, Ctrl-C or SIGTERM: the traces being analyzed are abandoned at once,
                # without waiting for the pool's threads (one interrupted may never answer)
                for future in pending:
                    future.cancel()
                for process in list(processes.values()):
                    process.terminate()
                raise
            finished_cleanly = True
        finally:
            pool.shutdown(wait=finished_cleanly, cancel_futures=True)
        return cast("list[R]", results)  # every item's result


def pool_context(fn: Callable[..., object]) -> BaseContext:
    """How the local pool starts its workers. ``fork`` (a copy of this process, which has
    imported the analysis already: nothing is imported or run again) when this process runs a
    single thread, so that no lock can be held by another thread at the fork, or when new
    interpreters would run ``__main__`` again: a script without ``if __name__ ==
    "__main__":`` would run its body once more in every worker, and ``python -`` has no file
    to run. Else ``forkserver``: workers forked from a server that has imported ``fn``'s
    module once (a notebook, a multi-threaded program)."""
    import multiprocessing

    if os.name != "posix":  # pragma: no cover
        return multiprocessing.get_context("spawn")
    if threading.active_count() == 1 or _main_run_again_by_workers():
        return multiprocessing.get_context("fork")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([getattr(fn, "__module__", "traceprof.job.rank")])
    return context


def _main_run_again_by_workers() -> bool:
    """Whether a new worker interpreter would run this program's ``__main__`` again: a script
    (or ``python -``), not a module run with ``-m``, a notebook or the interactive prompt."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return getattr(spec, "name", None) is None and getattr(main, "__file__", None) is not None


#: in a local worker: the shared array of the pid that took each item
_started: Any = None


def _init_worker(started: Any) -> None:
    """A local worker's start: Ctrl-C is the command's to handle (it stops the workers), and
    SIGTERM ends the worker without a word."""
    global _started
    _started = started
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _run_item(fn: Callable[[T], R], i: int, item: T) -> R:
    _started[i] = os.getpid()
    return fn(item)


def _lost_worker(
    items: list[Any], pending: list[int], started: Any, processes: dict[int, BaseProcess]
) -> WorkerLostError:
    """The error of a pool whose worker died: the item it held, by the pid that took it and
    how that process ended (the pool ends the other workers with SIGTERM)."""
    ended = {pid: p.exitcode for pid, p in processes.items()}
    running = [i for i in pending if started[i]]
    dead = [i for i in running if ended.get(started[i]) not in (None, -signal.SIGTERM)] or running
    advice = "if it ran out of memory, use fewer --jobs (each worker holds one trace) or more memory"
    if not dead:
        return WorkerLostError(f"the worker processes could not start or ended at once; {advice}")
    how = how_ended(ended.get(started[dead[0]]))
    others = f" (and {len(dead) - 1} more)" if len(dead) > 1 else ""
    return WorkerLostError(
        f"{item_name(items[dead[0]])}{others}: the worker process analyzing it {how}; {advice}"
    )


def how_ended(exitcode: int | None) -> str:
    """How a worker process ended, from its exit code: "was killed (SIGKILL)", ..."""
    if exitcode is None:
        return "ended"
    if exitcode < 0:
        try:
            return f"was killed ({signal.Signals(-exitcode).name})"
        except ValueError:
            return f"was killed (signal {-exitcode})"
    return f"ended with exit status {exitcode}"


#: seconds to wait for a Dask scheduler to answer, then for a first worker (--scheduler-timeout)
DEFAULT_SCHEDULER_TIMEOUT_S = 30.0

#: address schemes of a Dask scheduler
SCHEDULER_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss")


def check_scheduler_address(address: str) -> None:
    """Refuse an address that cannot be a Dask scheduler's, before connecting to anything."""
    scheme, sep, rest = address.rpartition("://")
    host, colon, port = rest.rpartition(":")
    if (sep and scheme not in SCHEDULER_SCHEMES) or not colon or not host or not port.isdigit():
        raise OptionError(
            f"--scheduler {address}: not the address of a Dask scheduler (expected tcp://HOST:PORT)"
        )


class DaskEngine:
    """A Dask distributed cluster: the one at ``scheduler`` (``tcp://HOST:PORT``), else a new
    ``LocalCluster`` of ``jobs`` worker processes (one thread each) for this call.
    ``scheduler_timeout``: the seconds to wait for the scheduler to answer, and then for a first
    worker to join it."""

    name = "dask"

    def __init__(
        self,
        scheduler: str | None = None,
        jobs: int | None = None,
        scheduler_timeout: float = DEFAULT_SCHEDULER_TIMEOUT_S,
    ) -> None:
        try:
            import distributed  # noqa: F401
        except ImportError:
            raise MissingDependencyError(
                "--engine dask needs Dask distributed: pip install 'traceprof[dask]'"
            ) from None
        if scheduler:
            check_scheduler_address(scheduler)
        if not scheduler_timeout > 0:
            raise OptionError(f"--scheduler-timeout must be more than 0 seconds, not {scheduler_timeout}")
        self.scheduler = scheduler
        self.jobs = jobs
        self.scheduler_timeout = scheduler_timeout

    def map(self, fn: Callable[[T], R], items: Sequence[T], progress: MapProgress | None = None) -> list[R]:
        from distributed import Client, KilledWorker, LocalCluster, as_completed

        items = list(items)
        if not items:
            return []
        cluster = None
        if self.scheduler:
            client = self._connect()
        else:
            import logging

            import dask

            # Workers forked from this process, which has imported the analysis already: spawned
            # ones (Dask's default) start a fresh interpreter each and took about 0.5 s more per
            # trace (16 ranks of 50 MB: 16.6 s against 8.6 s for the local pool; forked: see
            # docs/jobs.md). A trace's error reaches the command as its one-line message, not as
            # the workers' log of the failed task. No dashboard: nobody looks at it.
            method = "fork" if os.name == "posix" else "spawn"
            with dask.config.set({"distributed.worker.multiprocessing-method": method}):
                cluster = LocalCluster(
                    n_workers=worker_count(self.jobs or default_jobs(), len(items)),
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    # its HTTP server (health, metrics) on a free port: the default, 8787, may
                    # be taken, and Dask then warns in 4 lines
                    scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                    silence_logs=logging.CRITICAL,
                )
            client = Client(cluster)
        try:
            if self.scheduler:
                self._wait_for_a_worker(client)
            # pure=False: every item is analyzed, even two equal paths
            futures = client.map(fn, items, pure=False)
            index = {f.key: i for i, f in enumerate(futures)}
            results: list[R | None] = [None] * len(items)
            done = 0
            for future in as_completed(futures):
                i = index[future.key]
                try:
                    results[i] = future.result()
                except KilledWorker:
                    raise self._killed(items[i]) from None
                future.release()
                done += 1
                if progress:
                    progress(done, len(items), items[i])
            return cast("list[R]", results)  # every item's result
        finally:
            client.close()
            if cluster is not None:
                cluster.close()

    def _connect(self) -> Any:
        from distributed import Client

        self._check_scheduler()
        try:
            return Client(self.scheduler, timeout=f"{self.scheduler_timeout}s")
        except (OSError, TimeoutError):
            raise self._no_answer() from None

    def _no_answer(self) -> OptionError:
        return OptionError(
            f"--scheduler {self.scheduler}: no Dask scheduler answered in "
            f"{self.scheduler_timeout:g} s (is it running and reachable from here? "
            "--scheduler-timeout waits longer)"
        )

    def _check_scheduler(self) -> None:
        """Ask the address who it is, within ``scheduler_timeout`` whatever answers: Dask's own
        client waits without end on a listener that accepts and never answers, and reads any
        other server's bytes as a message of exabytes. The question runs on an event loop of its
        own, in a thread (a notebook's loop may be running in this one)."""
        import asyncio
        import threading

        timeout = self.scheduler_timeout
        answer: dict[str, Any] = {}

        async def identity() -> Any:
            from distributed.core import rpc

            async with rpc(self.scheduler, timeout=timeout) as scheduler:
                return await scheduler.identity()

        def ask() -> None:
            try:
                answer["identity"] = asyncio.run(asyncio.wait_for(identity(), timeout))
            except BaseException as e:  # reported in the caller's thread
                answer["error"] = e

        thread = threading.Thread(target=ask, name="traceprof-scheduler-check", daemon=True)
        thread.start()
        thread.join(timeout + 5)  # the loop's own deadline ends it; this one guards the guard
        error = answer.get("error")
        if not answer or isinstance(error, (TimeoutError, asyncio.TimeoutError)):
            raise self._no_answer()
        if isinstance(error, OSError) and not _closed_early(error):
            raise self._no_answer()
        found = answer.get("identity")
        kind = found.get("type") if isinstance(found, dict) else None
        if kind == "Scheduler":
            return
        if isinstance(kind, str):
            problem = f"that is a Dask {kind.lower()}, not a scheduler"
        else:
            said = f": {type(error).__name__}" if error is not None else ""
            problem = f"what answered there is not a Dask scheduler (it said what Dask cannot read{said})"
        raise OptionError(
            f"--scheduler {self.scheduler}: {problem}; give the scheduler's tcp://HOST:PORT, "
            "not its dashboard's or a worker's"
        )

    def _wait_for_a_worker(self, client: Any) -> None:
        try:
            client.wait_for_workers(1, timeout=self.scheduler_timeout)
        except TimeoutError:
            raise OptionError(
                f"--scheduler {self.scheduler}: no worker joined the scheduler in "
                f"{self.scheduler_timeout:g} s (start some: dask worker {self.scheduler}; "
                "--scheduler-timeout waits longer)"
            ) from None

    def _killed(self, item: object) -> WorkerLostError:
        advice = (
            "give the workers more memory (dask worker --memory-limit) or run fewer per machine"
            if self.scheduler
            else "use fewer --jobs (each worker holds one trace) or more memory"
        )
        return WorkerLostError(
            f"{item_name(item)}: every Dask worker that analyzed it died (killed, out of memory?); {advice}"
        )


def _closed_early(error: OSError) -> bool:
    """The peer closed the connection before it said who it is (Dask's CommClosedError)."""
    return type(error).__name__ == "CommClosedError"


ENGINES = ("local", "dask")


def make_engine(
    name: str = "local",
    jobs: int | None = None,
    scheduler: str | None = None,
    scheduler_timeout: float | None = None,
) -> Engine:
    """The engine called ``name`` (``local`` or ``dask``)."""
    if jobs is not None and jobs < 1:
        raise OptionError(f"--jobs must be 1 or more, not {jobs}")
    if name == "local":
        if scheduler:
            raise OptionError("--scheduler applies to --engine dask")
        if scheduler_timeout is not None:
            raise OptionError("--scheduler-timeout applies to --engine dask")
        return LocalEngine(jobs)
    if name == "dask":
        if scheduler_timeout is None:
            return DaskEngine(scheduler, jobs)
        return DaskEngine(scheduler, jobs, scheduler_timeout)
    raise OptionError(f"unknown engine {name!r} (known: {', '.join(ENGINES)})")

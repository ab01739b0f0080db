"""Decode the runs of a trace's event array with several processes, as its text arrives.

:func:`stream_document` is given the JSON of a trace in blocks (by :mod:`traceprof.read.load`)
and cuts it into runs of whole events with :mod:`traceprof.read.chunks`. A pool of worker
processes (``jobs``) decodes the runs (:mod:`traceprof.read.runs`) into
:class:`~traceprof.read.columns.Columns` (only the values traceprof reads; the events of a run
are freed as soon as its columns exist); the columns are joined in order. A plain file is read
by the workers themselves (only offsets travel to them); a gzip file is inflated by one reader
and its runs are sent to the workers. A trace of fewer than :data:`POOL_MIN_RUNS` runs is read
whole first, then shared between the reading process and workers forked then, which inherit its
text (:func:`decode_shared`). The result is the same whatever the number of workers or the size
of the runs.

Whatever the runs cannot say the same as a whole-document decode (text that is not valid JSON,
values of unexpected types, repeated top-level keys, values nested too deeply, ``B``/``E``
events) raises :class:`~traceprof.read.runs.Fallback`: the whole-document decoder says it (or
reads it) as before.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceprof.engine import EngineWarning, WorkerLostError, cpu_count, how_ended
from traceprof.read import chunks
from traceprof.read.columns import Columns, Joiner
from traceprof.read.limits import MemoryBudget
from traceprof.read.runs import Fallback, decode_file_run, decode_run, decode_text_run

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

#: runs in flight per worker, decoding or queued (bounds the memory of the text in flight)
_QUEUED_PER_WORKER = 4
#: a trace of fewer runs of ``chunk_bytes`` (when its size is known) is not given to a pool as
#: it arrives: it is shared (see :func:`decode_shared`). Below that size, starting a pool's
#: workers and sending them the text cost more than the decoding they share (measured with
#: 8 MB runs and two workers: 70 MB of gzip text broke even)
POOL_MIN_RUNS = 8
#: runs per process in a shared trace: the processes finish within a run of each other; each
#: decodes its runs one after the other and reuses the memory of the last one (fewer page
#: faults than one large run); the text the scanner reads after the last cut is short
SHARED_RUNS_PER_PROCESS = 8
_SHARED_MIN_RUN_BYTES = 1 << 20


def shared_run_bytes(json_bytes: int | None, jobs: int, chunk_bytes: int) -> int | None:
    """The bytes per run when a trace of ``json_bytes`` of JSON (None: not known) is shared
    among ``jobs`` processes; None when it is not shared (a pool decodes a trace of many runs,
    or of unknown size, and one process decodes all the runs when ``jobs`` is 1)."""
    if json_bytes is None or json_bytes >= POOL_MIN_RUNS * chunk_bytes or jobs <= 1:
        return None
    if not hasattr(os, "fork"):  # pragma: no cover - not on Unix
        return None
    share = -(-json_bytes // (SHARED_RUNS_PER_PROCESS * jobs))
    return max(min(share, chunk_bytes), min(_SHARED_MIN_RUN_BYTES, chunk_bytes))


def worker_signals() -> None:
    """In a decoding worker: Ctrl-C (sent to the whole process group) is the reading process's
    to handle, and SIGTERM, which it sends to stop a worker, ends the worker at once, whatever
    handlers the command had set before the fork."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _fork_context():
    """The "fork" multiprocessing context of a pool (None where there is none): workers forked
    from the reading process start at once."""
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        return None  # pragma: no cover - not on Linux
    return multiprocessing.get_context("fork")


def default_jobs() -> int:
    """Decoding workers by default: the CPUs this process may use; 1 in a worker process of
    its own (a job's ranks are already analyzed in parallel)."""
    multiprocessing = sys.modules.get("multiprocessing")  # not imported: not its worker
    if multiprocessing is not None and multiprocessing.parent_process() is not None:
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _daemonic() -> bool:
    multiprocessing = sys.modules.get("multiprocessing")  # not imported: not its worker
    return multiprocessing is not None and bool(multiprocessing.current_process().daemon)


def decoding_workers(jobs: int, runs: int | None) -> int:
    """The processes that decode a trace of ``runs`` runs (None: not known) with ``--jobs
    jobs``: never more than its runs (a worker without a run costs a process and the text in
    flight to it for nothing), and a warning above the CPUs, as a job's workers
    (:func:`traceprof.engine.worker_count`)."""
    workers = min(jobs, runs) if runs is not None else jobs
    cpus = cpu_count()
    if workers > cpus:
        warnings.warn(
            f"--jobs {jobs}: {workers} processes decoding one trace on {cpus} CPUs compete for them "
            f"and each holds runs of its text in memory; --jobs {cpus} or fewer is faster",
            EngineWarning,
            stacklevel=2,
        )
    return max(workers, 1)


class _Pool:
    """Runs decoded in order by ``jobs`` worker processes (1: in this process). When every
    worker has its share of runs in flight, the reading process waits for the oldest. It does
    not decode a run itself: with a worker on every core (the default) it would only take a
    core from one of them (measured on 1 GB with two workers on two cores: the load took 7.2 s
    against 7.4 to 7.7 s when the reading process helped). A worker that dies (killed, out of
    memory) ends the load with a :class:`~traceprof.engine.WorkerLostError` naming ``path``."""

    def __init__(self, jobs: int, path: Path | None = None) -> None:
        self.path = path
        self.jobs = jobs
        self.executor: ProcessPoolExecutor | None = None
        self.pending: list[Future] = []  # in run order
        self.joined = Joiner()  # the runs decoded, joined as they come
        #: the pool's worker processes, kept here: a broken pool forgets its own
        self.workers: dict[int, Any] = {}

    def submit(self, fn, task) -> None:
        if self.jobs <= 1:
            self.joined.add(fn(task))
            return
        from concurrent.futures.process import BrokenProcessPool  # imported by the pool anyway

        if self.executor is None:
            from concurrent.futures import ProcessPoolExecutor

            self.executor = ProcessPoolExecutor(
                self.jobs, mp_context=_fork_context(), initializer=worker_signals
            )
        self._collect(wait=False)
        while len(self.pending) >= self.jobs * _QUEUED_PER_WORKER:
            self._collect_one()
        try:
            self.pending.append(self.executor.submit(fn, task))
        except BrokenProcessPool:
            raise self._lost() from None
        self.workers.update(getattr(self.executor, "_processes", None) or {})

    def _collect(self, wait: bool) -> None:
        """Join the finished runs at the head of the queue (all when ``wait``)."""
        while self.pending and (wait or self.pending[0].done()):
            self._collect_one()

    def _collect_one(self) -> None:
        from concurrent.futures.process import BrokenProcessPool

        head = self.pending.pop(0)
        try:
            self.joined.add(head.result())
        except BrokenProcessPool:
            raise self._lost() from None

    def _lost(self) -> WorkerLostError:
        """The error of a pool whose worker died, with how it ended."""
        processes = {**self.workers, **(getattr(self.executor, "_processes", None) or {})}
        # a worker the pool's own thread is still reaping: its exit code, once that thread has it
        deadline = time.monotonic() + 2
        for p in processes.values():
            while p.exitcode is None and time.monotonic() < deadline:
                time.sleep(0.02)
        codes = [p.exitcode for p in processes.values() if p.exitcode not in (None, 0, -signal.SIGTERM)]
        how = how_ended(codes[0] if codes else None)
        return WorkerLostError(
            f"{self.path or 'the trace'}: a process decoding it {how}; if it ran out of memory, use "
            "fewer --jobs (each holds runs of the trace's text) or more memory"
        )

    def results(self) -> Joiner:
        self._collect(wait=True)
        return self.joined

    def close(self) -> None:
        if self.executor is not None:
            for f in self.pending:
                f.cancel()
            self.executor.shutdown(wait=True, cancel_futures=True)
            self.executor = None


class Recut(Exception):
    """A run cut at a likely boundary (:class:`traceprof.read.chunks.Cutter`) did not decode: the
    text is read again and cut by the scanner, which says the same as a whole-document decode
    (or sends the trace to it)."""


class _Blocks:
    """Text kept as the blocks it came in (not copied into one buffer), from ``start`` on."""

    def __init__(self) -> None:
        self.blocks: list[bytes] = []
        self.start = 0

    def append(self, block: bytes) -> None:
        self.blocks.append(block)

    def drop_before(self, offset: int) -> None:
        while self.blocks and self.start + len(self.blocks[0]) <= offset:
            self.start += len(self.blocks.pop(0))

    def text(self, start: int, end: int) -> bytearray:
        """Bytes ``[start, end)`` with a spare byte at each end (see :func:`decode_run`)."""
        text = bytearray(end - start + 2)
        view = memoryview(text)
        at = self.start
        for block in self.blocks:
            lo, hi = max(start, at), min(end, at + len(block))
            if lo < hi:
                view[1 + lo - start : 1 + hi - start] = memoryview(block)[lo - at : hi - at]
            at += len(block)
        return text


class _RunQueue:
    """The indices of a shared trace's runs, written into a pipe before the workers are forked.
    A process takes the next run by reading its index: a read of one index is atomic, so every
    run is taken once, by one process; the empty pipe, its writing end closed, says no run is
    left."""

    _INDEX = 4  # bytes per index
    #: the indices fit in the smallest buffer a pipe gets (one page), so they are all written
    #: before any process reads
    MAX_RUNS = 4096 // _INDEX

    def __init__(self, runs: int) -> None:
        self.fd, write = os.pipe()
        try:
            data = b"".join(i.to_bytes(self._INDEX, "little") for i in range(runs))
            os.set_blocking(write, False)
            if os.write(write, data) != len(data):  # pragma: no cover - at most one page
                raise OSError("the run indices did not fit in the pipe")
        except OSError:
            os.close(self.fd)
            raise
        finally:
            os.close(write)

    def take(self) -> int | None:
        index = os.read(self.fd, self._INDEX)
        return int.from_bytes(index, "little") if index else None

    def close(self) -> None:
        os.close(self.fd)


def decode_shared(runs: list[chunks.Run], text: _Blocks, jobs: int) -> list[Columns]:
    """The columns of the runs of a trace whose whole text is read, decoded by this process
    and ``jobs - 1`` workers forked now. The workers inherit the text: nothing is sent to them,
    and they start at once. Each process takes the next run no process has taken
    (:class:`_RunQueue`), until none is left, so they finish within a run of each other: the
    work per byte differs along a trace (the second half of the 35 MB ResNet-50 trace takes
    twice the time of the first), and equal parts would leave one process waiting for the
    other. Each worker sends its columns back once, through a pipe, at the end. (A pool would
    pass each run through threads of this process, which wait for this process's decoding to
    let go of the interpreter; and ``multiprocessing`` alone takes 12 ms to import.)"""
    workers = decoding_workers(jobs, len(runs)) - 1 if hasattr(os, "fork") else 0
    if workers <= 0 or len(runs) > _RunQueue.MAX_RUNS:
        return [decode_run(text.text(run.start, run.end), run.first) for run in runs]
    queue = _RunQueue(len(runs))
    children: list[tuple[int, int]] = []  # (process id, reading end of its pipe)
    received = False
    try:
        for _ in range(workers):
            read, write = os.pipe()
            try:
                pid = os.fork()
            except OSError:  # no more processes: the ones started share the runs
                os.close(read)
                os.close(write)
                break
            if pid == 0:
                os.close(read)
                _work(queue, runs, text, write)  # does not return
            os.close(write)
            children.append((pid, read))
        parts = dict(_decode_taken(queue, runs, text))
        for _, read in children:
            parts.update(_received(read))
        received = True
    finally:
        queue.close()
        for pid, read in children:
            os.close(read)
            if not received:  # it may still be decoding, or waiting to send
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:  # pragma: no cover - it had just ended
                    pass
            os.waitpid(pid, 0)
    return [parts[i] for i in range(len(runs))]


def _decode_taken(queue: _RunQueue, runs: list[chunks.Run], text: _Blocks) -> list[tuple[int, Columns]]:
    """Take the next run and decode it, until no run is left: (index, columns) of each."""
    out = []
    while (i := queue.take()) is not None:
        run = runs[i]
        out.append((i, decode_run(text.text(run.start, run.end), run.first)))
    return out


def _work(queue: _RunQueue, runs: list[chunks.Run], text: _Blocks, write: int) -> None:
    """A forked worker's part of :func:`decode_shared`: it sends its runs' columns, or its
    error, and ends at once, without flushing standard streams (a thread of the reading
    process, a progress bar's, may have held their lock when it forked)."""
    try:
        worker_signals()
        try:
            outcome: Any = _decode_taken(queue, runs, text)
        except Exception as e:  # Fallback, or a failure the reading process reports
            outcome = e
        import pickle

        view = memoryview(pickle.dumps(outcome, pickle.HIGHEST_PROTOCOL))
        while view:
            view = view[os.write(write, view) :]
    finally:
        os._exit(0)  # the reading process reads a worker that sent nothing as one that failed


def _received(read: int) -> list[tuple[int, Columns]]:
    """What a worker sent: its runs' columns (its error is raised here)."""
    import pickle

    data = b"".join(iter(lambda: os.read(read, 1 << 20), b""))
    try:
        outcome = pickle.loads(data)
    except Exception:  # nothing, or less than it meant to send
        raise Fallback("a decoding worker ended without its runs") from None
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def stream_document(
    path: Path,
    blocks: Iterator[bytes],
    regular_offset: int | None,
    jobs: int,
    chunk_bytes: int,
    budget: MemoryBudget,
    splitter: type = chunks.Scanner,
    json_bytes: int | None = None,
) -> tuple[chunks.Outline, Columns]:
    """Cut the JSON ``blocks`` into runs with ``splitter`` (:class:`traceprof.read.chunks.Cutter` or
    :class:`~traceprof.read.chunks.Scanner`) and decode them with ``jobs`` processes, counting each
    block against ``budget``. ``regular_offset``: where the JSON starts in ``path`` when the
    workers may read the runs from the file (else the runs' text is sent to them).
    ``json_bytes``: the size of the JSON when it is known (or claimed by a gzip trailer): a
    trace of fewer than :data:`POOL_MIN_RUNS` runs is decoded by the reading process alone, or
    shared among ``jobs`` processes once it is read (:func:`decode_shared`); a larger one goes
    to a pool as it arrives. Fallback when the scanner's runs cannot say what a whole-document
    decode says; Recut when the cutter's runs do not decode."""
    if _daemonic():
        jobs = 1  # a daemonic process (a multiprocessing pool's worker) may not start processes
    small = json_bytes is not None and json_bytes < POOL_MIN_RUNS * chunk_bytes
    run_bytes = shared_run_bytes(json_bytes, jobs, chunk_bytes)
    if not small and run_bytes is None and jobs > 1:  # a pool, for runs of chunk_bytes
        jobs = decoding_workers(jobs, -(-json_bytes // chunk_bytes) if json_bytes is not None else None)
    cutter = splitter(run_bytes or chunk_bytes)
    pool = _Pool(1 if small else jobs, path)
    pending = _Blocks()  # the text not yet sent, when it is sent; all of it, when shared
    held: list[chunks.Run] | None = [] if run_bytes else None  # runs of a shared trace

    def submit(runs: list[chunks.Run]) -> None:
        if held is not None:
            held.extend(runs)
            return
        for run in runs:
            if regular_offset is not None:
                pool.submit(
                    decode_file_run,
                    (str(path), regular_offset + run.start, regular_offset + run.end, run.first),
                )
            else:
                pool.submit(decode_text_run, (pending.text(run.start, run.end), run.first))

    try:
        for block in blocks:
            runs = cutter.feed(block)
            budget.add(block, cutter.objects)
            if regular_offset is None or held is not None:
                pending.append(block)
            if held is not None and cutter.offset > 2 * POOL_MIN_RUNS * chunk_bytes:
                # far more text than a gzip trailer claimed (it says the size modulo 4 GiB):
                # not held in memory, but sent to a pool as it arrives
                runs, held = held + runs, None
                pool = _Pool(decoding_workers(jobs, None), path)
            submit(runs)
            if held is None:
                pending.drop_before(cutter.keep_from)
        if isinstance(cutter, chunks.Cutter):
            submit(cutter.finish())
            outline = cutter.outline
            assert outline is not None  # finish() sets it
        else:
            outline = cutter.finish()
        if held is None:
            joined = pool.results()
        else:
            joined = Joiner()
            for part in decode_shared(held, pending, jobs):
                joined.add(part)
    except (Fallback, chunks.Unsplittable) as e:
        if isinstance(cutter, chunks.Cutter):
            raise Recut(str(e)) from None
        raise Fallback(str(e)) from None
    finally:
        pool.close()
    if joined.begin_end:
        raise Fallback("B/E events")  # paired across runs: the whole document pairs them
    return outline, joined.joined()

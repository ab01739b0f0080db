"""The capture session: ``torch.profiler.profile`` plus module scopes and the module table.

This file imports no torch at module level; torch is imported when a session is entered.
"""

from __future__ import annotations

import gzip
import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TextIO

import msgspec

from traceprof.api import analyze as analyze_trace
from traceprof.capture.compiled import failure_table
from traceprof.capture.compiled_modules import inside_compiled, named_model_modules, runs_compiled
from traceprof.capture.module_table import build_table, describe_modules, encode_table
from traceprof.errors import OptionError
from traceprof.render.registry import RenderOptions
from traceprof.render.tree import render_tree
from traceprof.result.model import ModuleProfile
from traceprof.trace.model import RawModuleRow
from traceprof.trace.schema import COMPILED_TABLE_KEY
from traceprof.trace.schema import MODULE_TABLE_KEY as TABLE_KEY
from traceprof.units import printable

__all__ = ["CapturedTrace", "profile", "profile_once", "write_trace"]


class CapturedTrace(str):
    """The path of a trace that the capture helper wrote, with its analysis one call away.

    A ``str`` (usable wherever a path is: ``traceprof.analyze``, ``open``, ``os.fspath``) that
    also has :meth:`analyze` and :meth:`report`. ``profile.trace_paths`` holds these, and
    ``profile_once`` returns one.
    """

    __slots__ = ()

    def analyze(self, **options: Any) -> ModuleProfile:
        """The trace's :class:`~traceprof.ModuleProfile`: ``traceprof.analyze(path, **options)``
        (``step``, ``hierarchy``, ``depth``, ``top``, ``sort``, ``peak_tflops``, ...)."""
        return analyze_trace(str(self), **options)

    def report(
        self,
        depth: int | None = None,
        *,
        top: int | None = None,
        raw: bool = False,
        unsupported_ops: bool = False,
        batch_size: int | None = None,
        file: TextIO | None = None,
        **options: Any,
    ) -> None:
        """Print the DeepSpeed-flops-profiler-style report of the trace (``traceprof analyze
        --format tree``): summary, aggregated profile, and the module tree down to ``depth``
        (default: every module).

        ``top``: keep the ``top`` largest children of each node, and show as many modules per
        depth in the aggregated profile (default there: 3). ``raw``: plain microseconds and
        numbers. ``unsupported_ops``: list the ops without a FLOP formula. ``batch_size``: samples
        per step, for samples/second (default: dim 0 of the model's first input). ``file``: where
        to print (default: standard output). ``options`` go to :meth:`analyze` (``step``,
        ``sort``, ``hierarchy``, ``peak_tflops``, ...).
        """
        result = self.analyze(depth=depth, top=top, **options)
        render_options = RenderOptions(
            raw_numbers=raw, unsupported_ops=unsupported_ops, batch_size=batch_size
        )
        if top is not None:
            render_options = msgspec.structs.replace(render_options, top_modules=top)
        # control characters in names shown escaped, as every text output shows them
        print(printable(render_tree(result, render_options)), end="", file=file)  # None: standard output


class profile:
    """Profile a training or inference loop; one scope per module call, one module table.

    ::

        with traceprof.capture.profile(model, logdir="runs/exp1") as prof:
            for batch in loader:
                train_step(batch)
                prof.step()

    Wraps ``torch.profiler.profile`` with ``activities`` CPU (+ CUDA when
    ``torch.cuda.is_available()``), ``schedule=torch.profiler.schedule(wait, warmup, active,
    repeat)``, ``record_shapes=True``, ``with_flops=True`` and the given ``profile_memory`` and
    ``with_stack`` (not ``with_modules``: it records module paths of TorchScript only, and torch
    2.14 deprecates it; the scopes below give the module tree). Each finished cycle is written as
    a gzipped Chrome trace ``<worker_name>.<ms>.pt.trace.json.gz`` into ``logdir`` (TensorBoard's
    naming; written to a temporary file and renamed, so a reader never sees half a file);
    ``trace_paths`` lists the files written so far (:class:`CapturedTrace`). ``profiler`` is the underlying
    ``torch.profiler.profile`` (``None`` when this rank does not profile). :meth:`analyze` returns
    the ``ModuleProfile`` of the last trace written and :meth:`report` prints its module tree, in
    the loop (once a cycle has ended) or after it.

    During warmup and active steps every call of every module of ``model`` opens one scope
    ``[traceprof:1]<Class>: <qualified.name>`` (see ``docs/trace-conventions.md``). The first
    call of each module in a cycle's active steps records its input and output shapes; the module
    table (``named_modules()`` with parameter counts, ``extra_repr`` and those shapes) is added to
    the trace's top level under ``"traceprof"`` by ``step()`` at the end of the cycle's first
    active step (again at a later active step only if modules not seen before were called). That
    costs about 0.5-1 ms of CPU for a model of 100-200 modules, once per cycle, inside that
    step's ``ProfilerStep#N`` but outside every module scope. All hooks are removed when the
    ``with`` block ends, also when it ends with an exception.

    Distributed runs: the rank and world size come from ``torch.distributed`` when it is
    initialized, else from the ``RANK`` and ``WORLD_SIZE`` environment variables (torchrun's),
    else 0 and 1; they go into the module table, and into the default worker name
    ``<hostname>_<pid>.rank<R>of<W>`` when the run is distributed. With ``ranks=[0, ...]`` only
    those ranks profile: on the others the session does nothing (``step()`` is a no-op, no hooks,
    no files).

    ``torch.compile`` (``docs/capture.md``): with ``record_compiled=True`` (the default) the
    session records, from ``__enter__`` on (before the wait and warmup steps, so graphs compiled
    in the first steps are recorded), every graph Inductor compiles: which module each of its
    kernels works for (:class:`traceprof.capture.compiled.CompiledGraphRecorder`). That table is
    added to the trace's top level under ``"traceprof_compiled"`` next to the module table, when
    it is not empty. While the session is active it changes a few Inductor settings (kernel
    profiling records, provenance tracking, a custom post-grad pass, a wrapper around
    ``CompiledFxGraph.post_compile``) and restores all of them on exit, also on exceptions. A
    failure of the recorder never stops the loop: the session warns and goes on without the table.

    Module names are those of the original model whatever way it was compiled: a
    ``torch.compile`` wrapper (``OptimizedModule``, as the model or as a submodule) stands for
    the module it wraps, named without ``_orig_mod.``; its hooks run eagerly around the compiled
    call and give that module's scope. A module compiled in place (``module.compile()``, the
    model or blocks one by one) gets its scope from a wrapper around its compiled call instead of
    hooks (hooks would run inside the compiled code). The submodules of a compiled module get no
    hooks at all: Dynamo would trace them into the graphs and guard on their ids, so blocks
    compiled one by one would recompile block after block, and every graph traced with them
    would recompile once they are removed; inside compiled code the kernel table places the work
    instead. Modules that run compiled code the session cannot see (the model called from a
    ``torch.compile``'d function) keep their hooks; those return at once under
    ``torch.compiler.is_compiling()``. Graphs compiled before the session began are not
    recorded: enter the session before the first call of a compiled model. Graphs that an
    earlier session in this process recorded for a compiled module of the same class are
    embedded again (Dynamo runs them without compiling them again).
    """

    def __init__(
        self,
        model: Any,
        logdir: str | os.PathLike = "runs/traceprof",
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        repeat: int = 1,
        profile_memory: bool = False,
        with_stack: bool = False,
        ranks: Iterable[int] | None = None,
        worker_name: str | None = None,
        *,
        record_compiled: bool = True,
        _trace_file: str | os.PathLike | None = None,
    ) -> None:
        for label, value, least in (
            ("wait", wait, 0),
            ("warmup", warmup, 0),
            ("active", active, 1),
            ("repeat", repeat, 0),
        ):
            if not isinstance(value, int) or value < least:
                raise ValueError(f"{label} must be an integer >= {least}, got {value!r}")
        self.model = model
        self.logdir = os.fspath(logdir)
        self.wait, self.warmup, self.active, self.repeat = wait, warmup, active, repeat
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.ranks = None if ranks is None else frozenset(int(r) for r in ranks)
        self.worker_name = worker_name
        self.record_compiled = record_compiled
        self.trace_paths: list[CapturedTrace] = []
        self.rank: int | None = None
        self.world_size: int | None = None
        self.enabled = False  #: True between enter and exit on a rank that profiles
        self.profiler: Any = None
        self.scope_kind: str | None = None  #: "record_function_fast" or "record_function"
        self._trace_file = None if _trace_file is None else os.fspath(_trace_file)
        self._entered = False
        self._steps = 0  # step() calls while profiling
        self._hooks: Any = None
        self._state: Any = None
        self._rows: list[RawModuleRow] = []
        self._embedded = False
        self._torch_version = ""
        self._recorder: Any = None  # the CompiledGraphRecorder while active
        self._earlier_classes: frozenset[str] = frozenset()  # earlier sessions' graphs of these
        self._compiled_payload: str | None = None  # the encoded compiled table (None: empty) ...
        self._compiled_payload_changes = -1  # ... as of this many recorded graphs
        self._compiled_embedded_changes = -1  # what the current cycle's trace holds (-1: nothing)

    # -- context manager -------------------------------------------------------------------

    def __enter__(self) -> profile:
        if self._entered:
            raise RuntimeError("a traceprof.capture.profile session can be entered only once")
        self._entered = True
        import torch
        from torch.profiler import ProfilerActivity, schedule

        from traceprof.capture.scopes import ScopeHooks, ScopeState

        self._torch_version = str(torch.__version__)
        self.rank, self.world_size, distributed = _distributed_info()
        if self.ranks is not None and self.rank not in self.ranks:
            return self
        if self.worker_name is None:
            import socket

            self.worker_name = f"{socket.gethostname()}_{os.getpid()}"
            if distributed:
                self.worker_name += f".rank{self.rank}of{self.world_size}"

        # torch.compile wrappers stand for the modules they wrap: names without "_orig_mod.",
        # hooks on the wrapper (they run eagerly around the compiled call)
        named = named_model_modules(self.model)
        self._rows = describe_modules((name, module) for name, module, _ in named)
        inside = inside_compiled(named)  # no hooks there: Dynamo would guard on them
        hooked = [
            (name, type(module).__name__, target) for name, module, target in named if name not in inside
        ]

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        compiled = any(runs_compiled(*entry) for entry in named)
        if compiled:  # graphs that an earlier session recorded for these modules may run again
            self._earlier_classes = frozenset(type(module).__name__ for _, module, _ in named)
        if self.record_compiled:  # before the first step: graphs compiled in it are recorded
            self._recorder = _start_recorder(self.model, compiled)
        self._state = ScopeState()
        try:
            self._hooks = ScopeHooks(hooked, self._state)
        except BaseException:
            self._stop_recorder()
            raise
        self.scope_kind = self._hooks.kind
        try:
            self.profiler = torch.profiler.profile(
                activities=activities,
                schedule=schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=self.repeat),
                on_trace_ready=self._on_trace_ready,
                record_shapes=True,
                with_flops=True,
                profile_memory=self.profile_memory,
                with_stack=self.with_stack,
            )
            self.profiler.__enter__()
        except BaseException:
            self._hooks.remove()
            self._stop_recorder()
            self.profiler = None
            raise
        self.enabled = True
        self._sync_state()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        if not self.enabled:
            return False
        self.enabled = False
        try:
            self._hooks.remove()  # also closes scopes left open (KeyboardInterrupt in forward)
            if self._recording():
                try:
                    self._embed_table()
                except Exception:
                    if exc_type is None:
                        raise  # else the user's exception is the one to see
        finally:
            try:
                self.profiler.__exit__(exc_type, exc, tb)  # saves the trace when in an active step
            finally:
                self._stop_recorder()  # every Inductor setting and patch back as it was
        return False

    # -- loop API ------------------------------------------------------------------------------

    def step(self) -> None:
        """Mark the end of a step (call once per iteration, after the optimizer step)."""
        if not self.enabled:
            return
        from torch.profiler import ProfilerAction

        previous = self.profiler.current_action
        if self._recording() and (self._state.dirty or not self._embedded):
            self._embed_table()
        elif previous == ProfilerAction.WARMUP or self._recording():
            # graphs compiled in this step: encoded and added now, so that the cost is paid in
            # the warmup steps (the active steps add the same payload again, ready-made)
            self._embed_compiled_table()
        self.profiler.step()
        if previous == ProfilerAction.RECORD_AND_SAVE:  # a cycle ended: next one starts afresh
            self._state.reset_calls()
            self._embedded = False
            self._compiled_embedded_changes = -1
        self._sync_state()
        self._steps += 1

    # -- results -------------------------------------------------------------------------------

    def analyze(self, **options: Any) -> ModuleProfile:
        """The :class:`~traceprof.ModuleProfile` of the last trace written (the last finished
        cycle): ``traceprof.analyze(trace_paths[-1], **options)``. Usable in the loop, once a
        cycle has ended, and after the ``with`` block. Raises :class:`~traceprof.TraceprofError`
        when no trace has been written yet, or on a rank that does not profile."""
        return self._last_trace().analyze(**options)

    def report(self, depth: int | None = None, **options: Any) -> None:
        """Print the DeepSpeed-flops-profiler-style report of the last trace written, with the
        module tree down to ``depth``: :meth:`CapturedTrace.report` of ``trace_paths[-1]``
        (``top``, ``raw``, ``unsupported_ops``, ``batch_size``, ``file``, and the options of
        :meth:`analyze`). Raises like :meth:`analyze`."""
        self._last_trace().report(depth, **options)

    def _last_trace(self) -> CapturedTrace:
        if self.trace_paths:
            return self.trace_paths[-1]
        raise OptionError(self._why_no_trace())

    def _why_no_trace(self) -> str:
        if not self._entered:
            return (
                "no trace written yet: the session has not started"
                " (with traceprof.capture.profile(...) as prof: ...)"
            )
        if self.ranks is not None and self.rank not in self.ranks:
            return f"rank {self.rank} does not profile (ranks={sorted(self.ranks)}): it writes no trace"
        schedule = f"wait={self.wait}, warmup={self.warmup}, active={self.active}"
        if not self.enabled:
            return (
                f"no trace written: the session ended before its active steps ({schedule};"
                f" step() calls: {self._steps})"
            )
        return (
            f"no trace written yet: the first is written at the end of the schedule's active steps"
            f" ({schedule}: at step() call {self.wait + self.warmup + self.active};"
            f" {self._steps} so far), or when the with block ends during them"
        )

    # -- internals -----------------------------------------------------------------------------

    def _recording(self) -> bool:
        from torch.profiler import ProfilerAction

        return self.profiler.current_action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)

    def _sync_state(self) -> None:
        from torch.profiler import ProfilerAction

        action = self.profiler.current_action
        self._state.capture_on = self._recording()
        self._state.scopes_on = action in (
            ProfilerAction.WARMUP,
            ProfilerAction.RECORD,
            ProfilerAction.RECORD_AND_SAVE,
        )

    def module_table(self) -> dict[str, Any]:
        """The module table as it would be embedded now (shapes of the current cycle). Modules
        inside compiled code run no hooks: their outputs come from the compiled graphs."""
        calls = self._state.calls if self._state is not None else {}
        if self._recorder is not None:
            calls = {**self._recorder.module_outputs(), **calls}
        return build_table(
            self._rows,
            calls,
            torch_version=self._torch_version,
            rank=self.rank if self.rank is not None else 0,
            world_size=self.world_size if self.world_size is not None else 1,
        )

    def compiled_table(self) -> dict[str, Any] | None:
        """The compiled-kernel table recorded so far (``None``: no recorder in this session)."""
        if self._recorder is None:
            return None
        return self._recorder.table(earlier=self._earlier_classes)

    def _embed_table(self) -> None:
        # add_metadata reaches the trace's top level only during warmup/active steps.
        self.profiler.add_metadata(TABLE_KEY, encode_table(self.module_table()))
        self._state.dirty = False
        self._embedded = True
        self._embed_compiled_table(again=True)  # next to the module table, in the active steps

    def _embed_compiled_table(self, again: bool = False) -> None:
        """Add the compiled table if it grew since this cycle last got it (or ``again``).

        Encoded only when it grew; an empty table (nothing compiled) is not added. Never raises:
        a failure warns and stops the recorder.
        """
        recorder = self._recorder
        if recorder is None:
            return
        changes = recorder.changes
        if changes == self._compiled_embedded_changes and not again:
            return
        try:
            if changes != self._compiled_payload_changes:
                # with the graphs an earlier session recorded for this model's classes, which
                # Dynamo runs again without compiling them (none for an eager model)
                table = recorder.table(earlier=self._earlier_classes)
                # empty (nothing compiled) only when the recorder has nothing to say either: a
                # table that could not record anything says why, for the analysis to repeat
                kept = table["graphs"] or table["warnings"] or table["omitted"]
                self._compiled_payload = encode_table(table) if kept else None
                self._compiled_payload_changes = changes
            if self._compiled_payload is not None:
                self.profiler.add_metadata(COMPILED_TABLE_KEY, self._compiled_payload)
            self._compiled_embedded_changes = changes
        except Exception as e:
            what = f"the compiled-kernel table could not be embedded ({type(e).__name__}: {e})"
            self._embed_failure(what)
            self._recorder_failed(what)

    def _embed_failure(self, what: str) -> None:
        """Put a table without graphs that says why in place of one that could not be written,
        so that the analysis states the cause instead of asking for a capture with the table."""
        try:
            failed = failure_table(what, self._torch_version)
            self.profiler.add_metadata(COMPILED_TABLE_KEY, encode_table(failed))
        except Exception:  # the warning below still tells the user
            pass

    def _recorder_failed(self, what: str) -> None:
        """Warn and go on without the compiled table."""
        warnings.warn(f"traceprof: {what}; the trace has no compiled-kernel table", stacklevel=3)
        self._stop_recorder()

    def _stop_recorder(self) -> None:
        """Exit the recorder (restoring Inductor's settings); warn about what it could not record."""
        recorder, self._recorder = self._recorder, None
        if recorder is None:
            return
        try:
            recorder.__exit__(None, None, None)
        except Exception as e:
            warnings.warn(
                f"traceprof: restoring Inductor's settings failed ({type(e).__name__}: {e})", stacklevel=3
            )
        if recorder.warnings:
            warnings.warn(
                f"traceprof: {len(recorder.warnings)} problem(s) while recording compiled graphs;"
                f" the first: {recorder.warnings[0]}",
                stacklevel=3,
            )

    def _on_trace_ready(self, prof: Any) -> None:
        if self._trace_file is not None:
            path = self._trace_file
        else:
            path = _next_trace_path(self.logdir, self.worker_name or "worker")
        write_trace(prof, path)
        self.trace_paths.append(CapturedTrace(path))


def profile_once(
    model: Any,
    *inputs: Any,
    backward: bool = False,
    loss_fn: Callable[[Any], Any] | None = None,
    path: str | os.PathLike = "trace.pt.trace.json.gz",
    **kw: Any,
) -> CapturedTrace | None:
    """Profile one call of ``model(*inputs)`` and write its trace to ``path``; return ``path``
    as a :class:`CapturedTrace` (a ``str``; ``.analyze()`` gives its ``ModuleProfile``,
    ``.report(depth=...)`` prints its module tree).

    Runs one warmup call (profiler warming up, not recorded) and then one recorded call. With
    ``backward=False`` both run under ``torch.no_grad()``; with ``backward=True`` each call also
    runs the backward of ``loss_fn(output)`` (default: the sum of the output's floating-point
    tensors). Gradients that the parameters had before are put back afterwards; other effects of
    calling the model twice (BatchNorm running statistics in train mode) stay. ``kw`` goes to
    :class:`profile` (``profile_memory``, ``with_stack``, ``ranks``, ``worker_name``). Returns
    ``None`` on a rank that ``ranks`` leaves out. ``path`` ending in ``.gz`` is gzipped.

    ::

        traceprof.capture.profile_once(model, x, backward=True).report(depth=2)
    """
    import torch

    session = profile(model, wait=0, warmup=1, active=1, repeat=1, _trace_file=path, **kw)
    params = list(model.parameters()) if backward else []
    saved_grads = [p.grad for p in params]
    for p in params:
        p.grad = None

    def run() -> None:
        if not backward:
            with torch.no_grad():
                model(*inputs)
            return
        output = model(*inputs)
        loss = loss_fn(output) if loss_fn is not None else _sum_tensors(output)
        loss.backward()

    try:
        with session as prof:
            for _ in range(2):
                run()
                prof.step()
    finally:
        for p, grad in zip(params, saved_grads):
            p.grad = grad
    return session.trace_paths[-1] if session.trace_paths else None


def write_trace(prof: Any, path: str | os.PathLike, compresslevel: int = 6) -> str:
    """Export ``prof``'s trace to ``path`` atomically (temporary file, then ``os.replace``).

    ``path`` ending in ``.gz`` is gzipped. The trace's ``traceName`` (the file name Kineto was
    given) is set to ``path`` rather than the temporary file's name. Returns ``path``.
    """
    import tempfile

    # one spelling of the path for the temporary file and the rename: "/a/x/../../dd" with x
    # missing named a directory that exists for one and not for the other
    path = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    base = os.path.basename(path)
    fd, tmp_json = tempfile.mkstemp(prefix=f".{base}.", suffix=".json.tmp", dir=directory)
    os.close(fd)
    tmp_out: str | None = None
    try:
        prof.export_chrome_trace(tmp_json)  # no .gz suffix: torch writes plain JSON
        fd, tmp_out = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=directory)
        with os.fdopen(fd, "wb") as raw, open(tmp_json, "rb") as src:
            if path.endswith(".gz"):
                with gzip.GzipFile(
                    filename=base[:-3], mode="wb", fileobj=raw, compresslevel=compresslevel
                ) as gz:
                    _copy_renaming(src, gz, tmp_json, path)
            else:
                _copy_renaming(src, raw, tmp_json, path)
        os.chmod(tmp_out, 0o644)
        os.replace(tmp_out, path)
        tmp_out = None
    finally:
        for leftover in (tmp_json, tmp_out):
            if leftover is not None and os.path.exists(leftover):
                os.remove(leftover)
    return path


def _copy_renaming(src: Any, dst: Any, old_name: str, new_name: str) -> None:
    """Copy ``src`` to ``dst`` with ``"traceName": "<old_name>"`` turned into ``new_name``."""
    if any(c in new_name for c in '"\\') or any(ord(c) < 32 for c in new_name):
        import shutil

        shutil.copyfileobj(src, dst, 1 << 20)
        return
    old = f'"traceName": "{old_name}"'.encode()
    new = f'"traceName": "{new_name}"'.encode()
    keep = len(old) - 1
    tail = b""
    while True:
        chunk = src.read(1 << 20)
        if not chunk:
            dst.write(tail)
            return
        data = (tail + chunk).replace(old, new)
        if len(data) > keep:
            dst.write(data[:-keep])
            tail = data[-keep:]
        else:
            tail = data


def _next_trace_path(logdir: str, worker_name: str) -> str:
    """``<logdir>/<worker>.<ms>.pt.trace.json.gz``, the ms bumped past any existing file."""
    ms = time.time_ns() // 1_000_000
    while True:
        path = os.path.join(logdir, f"{worker_name}.{ms}.pt.trace.json.gz")
        if not os.path.exists(path):
            return path
        ms += 1


def _distributed_info() -> tuple[int, int, bool]:
    """``(rank, world_size, distributed)`` from torch.distributed, else torchrun's variables."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), True
    try:
        rank = int(os.environ.get("RANK", "0"))
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1, False
    return rank, world_size, world_size > 1


def _start_recorder(model: Any, compiled: bool) -> Any:
    """An active :class:`CompiledGraphRecorder` for ``model``, or ``None`` when it cannot start.

    A recorder that cannot start (another one is active, a torch without the hooks it needs)
    leaves Inductor as it was; the session warns when the model is compiled and goes on.
    """
    from traceprof.capture.compiled import CompiledGraphRecorder

    named = named_model_modules(model)
    original = named[0][1] if named else model
    recorder = CompiledGraphRecorder(original)
    try:
        recorder.__enter__()
    except Exception as e:
        if compiled:
            warnings.warn(
                f"traceprof: compiled graphs are not recorded ({type(e).__name__}: {e}); the trace will"
                " have no compiled-kernel table",
                stacklevel=3,
            )
        return None
    return recorder


def _sum_tensors(output: Any) -> Any:
    """Sum of every floating-point tensor in ``output`` (nested tuples, lists, dicts)."""
    import torch

    total = None
    stack: list[Any] = [output]
    while stack:
        value = stack.pop()
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() or value.is_complex():
                part = value.sum() if not value.is_complex() else value.real.sum()
                total = part if total is None else total + part
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
            stack.extend(value)
    if total is None:
        raise ValueError("backward=True needs a floating-point tensor in the output, or a loss_fn")
    return total

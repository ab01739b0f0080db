"""What the trainer callbacks share: their options, the capture window, the headline numbers.

A :class:`CaptureWindow` is a :class:`traceprof.capture.profile` session driven by a trainer's
hooks: opened when training begins, stepped once per optimizer step, closed when its cycles are
done or training ends. Each trace it writes is analyzed (``traceprof.analyze``, in the training
process, one process) and summed up as a :class:`Headline`, which is logged and kept.

Imports no torch: the session imports it when it starts.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from traceprof import units
from traceprof.api import analyze
from traceprof.capture import profile
from traceprof.errors import OptionError, TraceprofError
from traceprof.result.model import ModuleNode, ModuleProfile, NodeKind

__all__ = ["CaptureOptions", "CaptureWindow", "Headline", "ModuleTime", "WindowResults", "headline"]

METRIC_PREFIX = "traceprof/"


@dataclass(frozen=True, slots=True)
class CaptureOptions:
    """The arguments of a trainer callback, checked when the callback is made."""

    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeat: int = 1
    ranks: frozenset[int] | None = None  #: None: every rank profiles
    profile_memory: bool = False
    with_stack: bool = False
    logdir: str | None = None  #: None: the trainer's log directory
    top: int = 5  #: modules named in the headline
    peak_tflops: float | None = None  #: the device's peak TFLOP/s, for MFU where traceprof has none
    analyze: bool = True  #: False: write the traces only

    @classmethod
    def checked(
        cls,
        *,
        wait: Any,
        warmup: Any,
        active: Any,
        repeat: Any,
        ranks: Any,
        profile_memory: Any,
        with_stack: Any,
        logdir: Any,
        top: Any,
        peak_tflops: Any,
        analyze: Any,
    ) -> CaptureOptions:
        """The options, or :class:`OptionError` with a one-line message for a bad value."""
        for name, value, least in (("wait", wait, 0), ("warmup", warmup, 0), ("active", active, 1)):
            _check_int(name, value, least)
        _check_int("repeat", repeat, 0)
        _check_int("top", top, 0)
        for name, value in (
            ("profile_memory", profile_memory),
            ("with_stack", with_stack),
            ("analyze", analyze),
        ):
            if not isinstance(value, bool):
                raise OptionError(f"{name} must be True or False, got {value!r}")
        if peak_tflops is not None and (
            isinstance(peak_tflops, bool) or not isinstance(peak_tflops, (int, float)) or not peak_tflops > 0
        ):
            raise OptionError(f"peak_tflops must be a number above 0, got {peak_tflops!r}")
        if logdir is not None and not isinstance(logdir, (str, os.PathLike)):
            raise OptionError(f"logdir must be a path, got {logdir!r}")
        return cls(
            wait=wait,
            warmup=warmup,
            active=active,
            repeat=repeat,
            ranks=_checked_ranks(ranks),
            profile_memory=profile_memory,
            with_stack=with_stack,
            logdir=None if logdir is None else os.fspath(logdir),
            top=top,
            peak_tflops=None if peak_tflops is None else float(peak_tflops),
            analyze=analyze,
        )


def _check_int(name: str, value: Any, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise OptionError(f"{name} must be an integer >= {least}, got {value!r}")


def _checked_ranks(ranks: Any) -> frozenset[int] | None:
    if ranks is None:
        return None
    if isinstance(ranks, int) and not isinstance(ranks, bool):
        ranks = [ranks]
    if isinstance(ranks, (str, bytes)) or not isinstance(ranks, Iterable):
        raise OptionError(f"ranks must be a list of rank numbers, got {ranks!r}")
    ranks = list(ranks)
    for rank in ranks:
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise OptionError(f"ranks must be a list of rank numbers (integers >= 0), got {ranks!r}")
    if not ranks:
        raise OptionError("ranks is empty: no rank would profile (None profiles every rank)")
    return frozenset(ranks)


@dataclass(frozen=True, slots=True)
class ModuleTime:
    """One module's own time per step (its time without its submodules'), or that of work that
    is no module's (``Headline.top_outside``)."""

    name: str  #: the qualified name; the class for the model itself; a group's name
    class_name: str
    own_us: float  #: GPU busy time, or CPU time on a trace without GPU work
    forward_us: float
    backward_us: float
    share: float  #: of the step's time of the same kind


@dataclass(frozen=True, slots=True)
class Headline:
    """The numbers of one trace a callback logs: means per step of the analyzed steps."""

    trace_path: str
    steps: tuple[int, ...]  #: the trainer's step numbers (global step after each)
    step_time_us: float  #: wall time of a step
    cpu_us: float  #: CPU time in ops of a step (every thread)
    gpu_busy_us: float | None  #: None: the trace has no GPU work
    flops: float  #: FLOPs per step, from the recorded shapes
    flop_per_s: float | None  #: over the GPU busy time (CPU time in ops without a GPU)
    mfu: float | None  #: None: the device's peak is not known (see ``peak_tflops``)
    top_modules: tuple[ModuleTime, ...] = field(default=())
    #: the largest work that is no module's, named apart: outside every module (the optimizer
    #: step, data loading), compiled work without module information, and on a trace without
    #: module events its annotations
    top_outside: tuple[ModuleTime, ...] = field(default=())

    @property
    def time_kind(self) -> str:
        """What the module times are: ``"GPU"`` busy time or ``"CPU"`` time."""
        return "CPU" if self.gpu_busy_us is None else "GPU"

    def metrics(self, prefix: str = METRIC_PREFIX) -> dict[str, float]:
        """The numbers as a flat dict of floats, for a trainer's loggers (times in ms)."""
        out = {f"{prefix}step_time_ms": self.step_time_us / 1000, f"{prefix}cpu_ms": self.cpu_us / 1000}
        if self.gpu_busy_us is not None:
            out[f"{prefix}gpu_busy_ms"] = self.gpu_busy_us / 1000
        if self.flops > 0:
            out[f"{prefix}flops"] = self.flops
        if self.flop_per_s is not None:
            out[f"{prefix}tflop_per_s"] = self.flop_per_s / 1e12
        if self.mfu is not None:
            out[f"{prefix}mfu"] = self.mfu
        for module in self.top_modules:
            out[f"{prefix}own_{self.time_kind.lower()}_ms/{module.name}"] = module.own_us / 1000
        for other in self.top_outside:
            out[f"{prefix}outside_{self.time_kind.lower()}_ms/{other.name}"] = other.own_us / 1000
        return out

    def message(self) -> str:
        """One line for a log."""
        parts = [f"step time {units.duration(self.step_time_us)}"]
        if self.gpu_busy_us is not None:
            parts.append(f"GPU busy {units.duration(self.gpu_busy_us)}")
        parts.append(f"CPU in ops {units.duration(self.cpu_us)}")
        if self.flop_per_s is not None:
            parts.append(units.flop_rate(self.flop_per_s))
        if self.mfu is not None:
            parts.append(f"MFU {units.percent(self.mfu)}")
        line = f"traceprof: {_steps_text(self.steps)}: " + ", ".join(parts)
        if self.top_modules:
            tops = ", ".join(
                f"{m.name} {units.percent(m.share)} (fwd {units.duration(m.forward_us)},"
                f" bwd {units.duration(m.backward_us)})"
                for m in self.top_modules
            )
            line += f"; top modules by own {self.time_kind} time: {tops}"
        if self.top_outside:
            rest = ", ".join(f"{m.name} {units.percent(m.share)}" for m in self.top_outside)
            line += f"; outside the modules: {rest}"
        return line + f"; trace {self.trace_path}"


def _steps_text(steps: tuple[int, ...]) -> str:
    if not steps:
        return "the trace"
    if len(steps) == 1:
        return f"step {steps[0]}"
    if steps == tuple(range(steps[0], steps[-1] + 1)):
        return f"steps {steps[0]}-{steps[-1]}"
    return "steps " + ",".join(map(str, steps))


def headline(result: ModuleProfile, trace_path: str, top: int = 5, first_step: int = 0) -> Headline:
    """The headline numbers of ``result``; ``first_step``: the trainer's global step when the
    session began (``ProfilerStep#N`` is the trainer's step ``first_step + N + 1``)."""
    selection = result.selection
    gpu = result.has_gpu
    rate = result.throughput(selection)
    return Headline(
        trace_path=trace_path,
        steps=tuple(first_step + n + 1 for n in selection.numbers),
        step_time_us=selection.wall_us,
        cpu_us=selection.cpu_in_ops_us,
        gpu_busy_us=selection.gpu_busy_us if gpu else None,
        flops=selection.flops,
        flop_per_s=rate.flop_per_s,
        mfu=rate.mfu,
        top_modules=top_modules(result, top),
        top_outside=top_outside(result, top),
    )


def top_modules(result: ModuleProfile, top: int) -> tuple[ModuleTime, ...]:
    """The ``top`` modules with the most own time per step (GPU busy, else CPU), largest first:
    modules only (a tree of user annotations has none; :func:`top_outside` names the rest)."""
    if not result.source.has_modules:
        return ()
    return _largest(result, [n for n in result.nodes if n.kind is NodeKind.MODULE], top)


def top_outside(result: ModuleProfile, top: int) -> tuple[ModuleTime, ...]:
    """The ``top`` nodes that are no module with the most own time per step: the groups of
    work outside every module (``Optimizer.step#AdamW.step``, ``enumerate(DataLoader)#...``),
    compiled work without module information, and the annotations of a tree without modules."""
    annotations = not result.source.has_modules
    others = [
        n
        for n in result.nodes
        if n.kind in (NodeKind.GROUP, NodeKind.COMPILED) or (annotations and n.kind is NodeKind.MODULE)
    ]
    return _largest(result, others, top)


def _largest(result: ModuleProfile, nodes: list[ModuleNode], top: int) -> tuple[ModuleTime, ...]:
    """The ``top`` of ``nodes`` with the most own time per step, largest first."""
    gpu = result.has_gpu
    whole = result.selection.gpu_busy_us if gpu else result.selection.cpu_us

    def own(node: ModuleNode, which: str) -> float:
        times = node.own if which == "all" else node.phase(which).own
        return times.gpu_busy_us if gpu else times.cpu_us

    chosen = sorted((n for n in nodes if own(n, "all") > 0), key=lambda n: -own(n, "all"))
    return tuple(
        ModuleTime(
            name=n.name if n.kind is NodeKind.GROUP else n.label,
            class_name=n.class_name,
            own_us=own(n, "all"),
            forward_us=own(n, "forward"),
            backward_us=own(n, "backward"),
            share=own(n, "all") / whole if whole > 0 else 0.0,
        )
        for n in chosen[:top]
    )


def check_logdir(logdir: str) -> None:
    """Make and try the directory a window writes its traces to, before the window opens: an
    OSError saying why nothing can be written there (a file, a path under a file, a dangling
    link, ``/dev/null``, a read-only directory)."""
    import tempfile

    if os.path.islink(logdir) and not os.path.exists(logdir):
        raise FileNotFoundError(errno.ENOENT, "a link to a path that does not exist")
    if os.path.lexists(logdir) and not os.path.isdir(logdir):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory")
    os.makedirs(logdir, exist_ok=True)
    fd, probe = tempfile.mkstemp(prefix=".traceprof-", suffix=".probe", dir=logdir)
    os.close(fd)
    os.unlink(probe)


class CaptureWindow:
    """A capture session over a window of a trainer's steps, and what came of it.

    ``open`` starts the session (closing one that a failed run left open), ``step`` marks the end
    of an optimizer step, ``close`` ends the session. ``step`` and ``close`` return the headlines
    of the traces written since the last call, each logged on ``log`` already. The session is
    closed as soon as its last cycle is written, so the hooks cost nothing for the rest of
    training.

    Profiling never stops training: a log directory where nothing can be written is found before
    the window opens (one warning, no window); a trace that cannot be written, or an analysis
    that fails, closes the window with a warning. An exception out of the model's forward (a
    trainer without an exception hook: the Hugging Face Trainer) closes it at the model's next
    call, or the next training's start, whichever comes first: its hooks and the profiler never
    stay on.
    """

    def __init__(self, options: CaptureOptions, log: logging.Logger) -> None:
        self.options = options
        self.log = log
        self.logdir: str | None = None
        self.trace_paths: list[str] = []
        self.profiles: list[ModuleProfile] = []
        self.headlines: list[Headline] = []
        self._session: profile | None = None
        self._watch: list[Any] = []  # the handles of the hooks that see the model raise
        self._raised: BaseException | None = None  # what left the model's forward
        self._first_step = 0
        self._steps = 0  # steps marked in the current session
        self._seen = 0  # the current session's traces already handled

    @property
    def active(self) -> bool:
        """True while a session is open on this rank."""
        return self._session is not None

    def open(self, model: Any, logdir: str, first_step: int = 0) -> None:
        """Start a session on ``model`` writing into ``logdir`` (when it can be written: else a
        warning, and training goes on without a window)."""
        self.close(analyze=False)
        # ".." taken out, as the trace writer takes it out of the temporary file's path: every
        # trace's temporary file and the trace itself in one directory
        logdir = os.path.normpath(logdir)
        o = self.options
        session = profile(
            model,
            logdir=logdir,
            wait=o.wait,
            warmup=o.warmup,
            active=o.active,
            repeat=o.repeat,
            profile_memory=o.profile_memory,
            with_stack=o.with_stack,
            ranks=o.ranks,
        )
        session.__enter__()
        if not session.enabled:  # a rank that does not profile
            session.__exit__(None, None, None)
            return
        try:
            check_logdir(logdir)
        except OSError as e:
            session.__exit__(None, None, None)  # before its first step: nothing is written
            self.log.warning(
                "traceprof: not profiling: the log directory %s cannot be written (%s); training goes on",
                logdir,
                e.strerror or e,
            )
            return
        self._session, self.logdir = session, logdir
        self._first_step, self._steps, self._seen = first_step, 0, 0
        self._watch_forward(model)

    def step(self) -> list[Headline]:
        """Mark the end of an optimizer step; the headlines of the traces it completed."""
        session = self._session
        if session is None:
            return []
        try:
            session.step()
        except Exception as e:  # a trace that cannot be written: the window closes, training goes on
            self._stop(f"writing its trace failed ({type(e).__name__}: {e})")
            return []
        self._steps += 1
        found = self._handle_new_traces(session, analyze=True)
        if self.options.repeat and len(session.trace_paths) >= self.options.repeat:
            self._exit()  # every cycle written: hooks and profiler off for the rest of training
        return found

    def close(self, analyze: bool = True) -> list[Headline]:
        """End the session (a partial active window is still written); the headlines of the
        traces not handled yet (none with ``analyze=False``)."""
        session = self._session
        if session is None:
            return []
        try:
            self._exit()
        except Exception as e:
            self.log.warning(
                "traceprof: the profiling window closed with an error (%s: %s); training goes on",
                type(e).__name__,
                e,
            )
        found = self._handle_new_traces(session, analyze=analyze)
        if not session.trace_paths:
            self.log.warning(
                "traceprof: no trace was written: training ended after %d step(s), before the first"
                " recorded step (wait=%d, warmup=%d, active=%d)",
                self._steps,
                self.options.wait,
                self.options.warmup,
                self.options.active,
            )
        return found

    def _stop(self, why: str) -> None:
        """Close the window at once, keeping what was written, with one warning."""
        self.log.warning("traceprof: profiling stopped: %s; training goes on", why)
        session = self._session
        try:
            self._exit(*sys.exc_info())
        except Exception:  # the window is closed (hooks off, profiler stopped) whatever it said
            pass
        if session is not None:
            self._handle_new_traces(session, analyze=False)

    def _exit(self, *exc_info: Any) -> None:
        session, self._session = self._session, None
        for handle in self._watch:
            handle.remove()
        self._watch, self._raised = [], None
        if session is not None:
            session.__exit__(*(exc_info or (None, None, None)))

    def _watch_forward(self, model: Any) -> None:
        """Hooks on ``model`` that see an exception leave its forward: an always-called hook
        that finds the call's normal hook did not run. The window cannot close there (torch is
        going through the model's hooks), so it closes at the model's next call."""
        register = getattr(model, "register_forward_hook", None)
        if register is None:
            return
        calls: list[bool] = []

        def started(module: Any, args: Any) -> None:
            if self._raised is not None:  # the next call after an exception: the window closes
                self._stop(f"the model raised in the profiled window ({self._raised!r})")
                return
            calls.append(False)

        def finished(module: Any, args: Any, output: Any) -> None:
            if calls:
                calls[-1] = True

        def ended(module: Any, args: Any, output: Any) -> None:
            if not (calls and calls.pop()) and self._session is not None:
                self._raised = sys.exc_info()[1] or RuntimeError("an exception")

        self._watch = [
            model.register_forward_pre_hook(started),
            register(finished),
            register(ended, always_call=True),
        ]

    def _handle_new_traces(self, session: profile, analyze: bool) -> list[Headline]:
        new = session.trace_paths[self._seen :]
        self._seen = len(session.trace_paths)
        found = []
        for path in new:
            self.trace_paths.append(path)
            self.log.info("traceprof: trace written: %s", path)
            if analyze and self.options.analyze:
                result = self._analyze(path)
                if result is not None:
                    found.append(result)
        return found

    def _analyze(self, path: str) -> Headline | None:
        """The trace's headline, logged; None (and a warning) when it cannot be analyzed: a
        failing analysis never stops training."""
        try:
            result = analyze(path, peak_tflops=self.options.peak_tflops, jobs=1)
        except TraceprofError as e:
            self.log.warning("traceprof: %s could not be analyzed: %s", path, e.message)
            return None
        except Exception as e:
            self.log.warning("traceprof: %s could not be analyzed (%s: %s)", path, type(e).__name__, e)
            return None
        line = headline(result, path, self.options.top, self._first_step)
        self.profiles.append(result)
        self.headlines.append(line)
        self.log.info("%s", line.message())
        return line


class WindowResults:
    """A trainer callback's capture window: the options every integration takes (one
    signature, checked by :meth:`CaptureOptions.checked`) and what the window keeps, as
    properties of the callback. A subclass names the logger its headlines go to (``_log``)."""

    _log: logging.Logger
    _window: CaptureWindow

    def __init__(
        self,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        repeat: int = 1,
        *,
        ranks: Iterable[int] | None = None,
        profile_memory: bool = False,
        with_stack: bool = False,
        logdir: str | os.PathLike | None = None,
        top: int = 5,
        peak_tflops: float | None = None,
        analyze: bool = True,
    ) -> None:
        self.options = CaptureOptions.checked(
            wait=wait,
            warmup=warmup,
            active=active,
            repeat=repeat,
            ranks=ranks,
            profile_memory=profile_memory,
            with_stack=with_stack,
            logdir=logdir,
            top=top,
            peak_tflops=peak_tflops,
            analyze=analyze,
        )
        self._window = CaptureWindow(self.options, self._log)

    @property
    def logdir(self) -> str | None:
        """Where the traces go; known once training began on a rank that profiles."""
        return self._window.logdir

    @property
    def trace_paths(self) -> list[str]:
        return self._window.trace_paths

    @property
    def profiles(self) -> list[ModuleProfile]:
        return self._window.profiles

    @property
    def headlines(self) -> list[Headline]:
        return self._window.headlines

    @property
    def profile(self) -> ModuleProfile | None:
        """The analysis of the last trace written (None: none yet)."""
        return self._window.profiles[-1] if self._window.profiles else None

    @property
    def headline(self) -> Headline | None:
        return self._window.headlines[-1] if self._window.headlines else None

    @property
    def metrics(self) -> dict[str, float]:
        """The last trace's numbers, ``traceprof/...`` keys as the trainer's loggers take them
        (``{}``: none yet)."""
        return self.headline.metrics() if self.headline is not None else {}

"""What the commands share: option types, progress bars, the one-line errors and exit codes,
signals, and writing a TensorBoard run. No command imports another; each imports this."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import click

from traceprof import options, startup, units
from traceprof.cli.choices import CACHE_DIR_ENV, SORT_KEYS, SOURCES
from traceprof.errors import TraceprofError
from traceprof.read.limits import ENV_VAR as MAX_MEMORY_ENV
from traceprof.read.limits import parse_size

if TYPE_CHECKING:
    from traceprof.render.registry import Registry, Renderer

# Only click and the command line are imported before a command runs (--help, --version and
# usage errors end before any): what a command needs beyond them, it imports when it runs.


#: the exit status of a bad option or argument (README "Errors"); click's own is 2, which
#: traceprof keeps for unreadable input
USAGE_EXIT_CODE = 3


class UsageExit(click.UsageError):
    """A usage error of click's (unknown option, bad value, missing argument): the same
    message on one line, as traceprof's other errors, with its exit status."""

    exit_code = USAGE_EXIT_CODE

    def show(self, file=None) -> None:
        command = self.ctx.command_path if self.ctx is not None else "traceprof"
        click.echo(f"traceprof: error: {self.format_message()} (see {command} --help)", file=file, err=True)


class Group(click.Group):
    """The ``traceprof`` group: click's usage errors, of the group and of its commands, exit
    with :data:`USAGE_EXIT_CODE`."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:
            raise _usage_exit(e) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            raise _usage_exit(e) from None


def _usage_exit(e: click.UsageError) -> click.UsageError:
    if isinstance(e, (UsageExit, click.exceptions.NoArgsIsHelpError)):
        return e
    return UsageExit(e.format_message(), e.ctx)


class Size(click.ParamType):
    """A memory size: 8G, 500M, 1.5GB, 12GiB or a number of bytes."""

    name = "size"

    def convert(self, value, param, ctx):
        try:
            return parse_size(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


class Number(click.ParamType):
    """A finite number of one kind (``int`` or ``float``) within ``min`` .. ``max`` (``min_open``:
    above ``min``). Refused: nan and infinities, and a negative zero (``-0``), which would pass a
    bound of 0 while meaning nothing. Every numeric option of every command is one."""

    def __init__(
        self,
        kind: type[int] | type[float] = float,
        min: float | None = None,
        max: float | None = None,
        min_open: bool = False,
    ) -> None:
        self.kind = kind
        self.min = min
        self.max = max
        self.min_open = min_open
        self.name = "integer" if kind is int else "number"

    def convert(self, value, param, ctx):
        try:
            return options.number(value, self.kind, min=self.min, max=self.max, min_open=self.min_open)
        except ValueError as e:
            self.fail(str(e), param, ctx)

    def __repr__(self) -> str:
        return f"Number({self.kind.__name__}, {self.min}, {self.max})"


MAX_MEMORY_HELP = (
    "Stop with an error when loading a trace would need more memory than SIZE (e.g. 8G, 500M), "
    f"estimated from its JSON as it is read; a job's limit is divided among the traces loaded "
    f"at once (--jobs) [default: ${MAX_MEMORY_ENV}, else 80% of the available memory]."
)


class ProgressBar:
    """A bar on stderr through the stages of loading a big trace (reading, decoding, indexing,
    attributing), with the current stage and the time elapsed; cleared when done. ``traces``
    None: a pulsing bar, for work whose stages are not known beforehand (a diff: a side from the
    cache has none)."""

    STAGES = 4  # per trace

    def __init__(self, traces: int | None = 1) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._task = self._progress.add_task("loading", total=self.STAGES * traces if traces else None)
        self._stages = 0
        self._progress.start()

    def __call__(self, message: str) -> None:
        if self._stages:
            self._progress.advance(self._task)
        self._stages += 1
        self._progress.update(self._task, description=message)
        self._progress.refresh()  # each stage shows at once, not at the next tick

    def close(self) -> None:
        self._progress.stop()


def progress_reporter(path: str | list[str], traces: int | None = 1) -> ProgressBar | None:
    """A progress bar when a person is watching stderr and the file (or the files together) is
    over 5 MB (the load takes a second or more); ``TRACEPROF_PROGRESS=always`` or ``never``
    overrides that. ``traces``: see :class:`ProgressBar`."""
    mode = os.environ.get("TRACEPROF_PROGRESS", "auto").lower()
    if mode == "never" or not sys.stderr.isatty():
        return None
    if mode != "always":
        try:
            if sum(map(os.path.getsize, [path] if isinstance(path, str) else path)) <= 5_000_000:
                return None
        except OSError:
            return None
    return ProgressBar(traces)


def color_terminal() -> bool:
    """Colors and tree guides: standard output is a terminal and NO_COLOR is not set."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def close(reporter: ProgressBar | JobProgressBar | None) -> None:
    if reporter is not None:
        reporter.close()


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived. Raised like Ctrl-C's KeyboardInterrupt, so that finally blocks run (a
    temporary output file is removed) before the process ends."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def _default_sigterm_in_child() -> None:
    # a process forked from the command (a Dask worker, a pool worker) ends at SIGTERM without
    # a word, where the command's handler would print its traceback, and leaves Ctrl-C to the
    # command, which stops it
    if signal.getsignal(signal.SIGTERM) in (_raise_terminated, startup.interrupted_at_start):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)


_fork_hook: list[bool] = []  # registered once per process


def stop_cleanly_on_sigterm() -> None:
    """While a command runs, SIGTERM raises :class:`Terminated` instead of ending the process
    at once; the previous handler is back when the command ends. Processes forked meanwhile
    get the default action back."""
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    if not _fork_hook and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_default_sigterm_in_child)
        _fork_hook.append(True)
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    click.get_current_context().call_on_close(lambda: signal.signal(signal.SIGTERM, previous))


def interrupted(e: KeyboardInterrupt) -> None:
    """Ctrl-C exits 130 and SIGTERM 143 (128 + the signal), as shells report them."""
    if isinstance(e, Terminated):
        fail("terminated", 128 + signal.SIGTERM)
    fail("interrupted", 130)


class JobProgressBar:
    """A bar on stderr over a job's traces: one advance per trace analyzed, with its name."""

    def __init__(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("analyzing traces"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=Console(stderr=True),
            transient=True,
        )
        self._task = self._progress.add_task("", total=total)
        self._progress.start()

    def __call__(self, done: int, total: int, item) -> None:
        path = item[0] if isinstance(item, tuple) else item
        self._progress.update(self._task, completed=done, description=os.path.basename(path))
        self._progress.refresh()

    def close(self) -> None:
        self._progress.stop()


def job_progress(total: int) -> JobProgressBar | None:
    """A bar per trace when a person is watching stderr (``TRACEPROF_PROGRESS`` overrides)."""
    mode = os.environ.get("TRACEPROF_PROGRESS", "auto").lower()
    if mode == "never" or (mode != "always" and not sys.stderr.isatty()):
        return None
    return JobProgressBar(total)


def write_tensorboard(traces, logdir: str, err: bool = False, **options):
    """Write ``traces`` as runs of ``logdir``; say which, and print write_logdir's warnings."""
    from traceprof.tensorboard import write_logdir

    reporter = progress_reporter(traces[0], len(traces))
    said: list[str] = []
    try:
        runs = list(write_logdir(traces, logdir, progress=reporter, warnings=said, **options))
    finally:
        close(reporter)
    for run in runs:
        click.echo(f"traceprof: wrote TensorBoard run {run.name} ({run.trace_path}) to {logdir}", err=err)
    print_warnings(said)


def fail(message: str, code: int) -> NoReturn:
    click.echo(f"traceprof: error: {units.printable(message)}", err=True)  # names come from traces
    sys.exit(code)


@contextlib.contextmanager
def reported_errors(out_of_memory: str) -> Iterator[None]:
    """Around a command's work: a TraceprofError is its one-line message and exit code, running
    out of memory is ``out_of_memory`` (exit 5), Ctrl-C and SIGTERM exit as shells report them."""
    try:
        yield
    except TraceprofError as e:
        fail(e.message, e.exit_code)
    except MemoryError:
        fail(out_of_memory, 5)
    except KeyboardInterrupt as e:
        interrupted(e)


def chosen_renderer(registry: Registry, fmt: str | None, output: str | None, inputs: list[str]) -> Renderer:
    """The renderer of ``--format`` (default: by ``-o``'s extension, else tree), with ``-o``
    refused before any work when it names an input, and binary formats refused on a terminal."""
    from traceprof.output import check_binary_output, resolve_output

    if output:  # refused before the analysis, and checked again when written
        resolve_output(output, inputs=inputs)
    if fmt is None:
        chosen = registry.for_output(output) if output else None
        fmt = chosen.name if chosen else "tree"
    renderer = registry.renderer(fmt)
    if renderer.binary:
        check_binary_output(fmt, output)
    return renderer


# --- the output options: what a command writes and where, the same in every command that writes a
# result (analyze and diff); each command names its own formats and files


def output_options(formats: tuple[str, ...], output_help: str) -> Callable[[Any], Any]:
    """``-f/--format NAME`` (one of ``formats``; the default follows ``-o``, checked by
    :func:`chosen_renderer`) and ``-o/--output FILE``, in that order."""
    fmt = click.option(
        "-f",
        "--format",
        "fmt",
        type=click.Choice(formats),
        default=None,
        help="Output format [default: from -o's extension, else tree].",
    )
    output = click.option(
        "-o",
        "--output",
        metavar="FILE",  # checked by output.resolve_output
        default=None,
        help=output_help,
    )
    return lambda command: fmt(output(command))


def raw_option(help: str) -> Callable[[Any], Any]:
    """``--raw``: numbers as plain numbers, not as text for people."""
    return click.option("--raw", is_flag=True, help=help)


def tensorboard_option(help: str) -> Callable[[Any], Any]:
    """``--tensorboard LOGDIR``: also write the inputs as runs of a TensorBoard log directory."""
    return click.option(
        "--tensorboard",
        "tensorboard_logdir",
        metavar="LOGDIR",
        default=None,
        type=click.Path(file_okay=False, path_type=str),
        help=help,
    )


# --- the shaping options: one declaration for analyze (a trace, a job, --ops) and diff, so that
# names, defaults, validation and errors are the same everywhere (docs/diff.md, docs/jobs.md)


def depth_option(help: str = "Show nodes down to this depth (0 = roots).") -> Callable[[Any], Any]:
    """``--depth N``: an integer, 0 or more."""
    return click.option("--depth", type=Number(int, min=0), default=None, help=help)


def top_option(help: str) -> Callable[[Any], Any]:
    """``--top N``: an integer, 1 or more."""
    return click.option("--top", type=Number(int, min=1), default=None, help=help)


def sort_option(help: str = "Order of siblings.", default: str = "order") -> Callable[[Any], Any]:
    """``--sort KEY``: one of :class:`~traceprof.result.transforms.SortKey`."""
    return click.option(
        "--sort",
        type=click.Choice(SORT_KEYS),
        default=default,
        show_default=True,
        help=help,
    )


def step_option(help: str) -> Callable[[Any], Any]:
    """``--step N``: a ProfilerStep number, 0 or more."""
    return click.option("--step", type=Number(int, min=0), default=None, help=help)


def ignore_option(
    help: str = "Hide modules whose class or qualified name matches PATTERN (fnmatch, "
    "repeatable); their time stays in their parent.",
) -> Callable[[Any], Any]:
    """``--ignore PATTERN``, repeatable."""
    return click.option("--ignore", "ignore", multiple=True, metavar="PATTERN", help=help)


# --- the loading options: the same in every command that reads traces


def hierarchy_option(help: str = "Where the module tree comes from.") -> Callable[[Any], Any]:
    """``--hierarchy SOURCE``: auto or a :class:`~traceprof.analysis.hierarchy.Source`."""
    return click.option(
        "--hierarchy", type=click.Choice(SOURCES), default="auto", show_default=True, help=help
    )


def peak_tflops_option(help: str) -> Callable[[Any], Any]:
    """``--peak-tflops X``: a number above 0."""
    return click.option("--peak-tflops", type=Number(float, min=0, min_open=True), default=None, help=help)


def max_memory_option(help: str = MAX_MEMORY_HELP) -> Callable[[Any], Any]:
    """``--max-memory SIZE``: bytes or a size such as 8G."""
    return click.option("--max-memory", type=Size(), default=None, metavar="SIZE", help=help)


def _no_cache(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        os.environ[CACHE_DIR_ENV] = "off"  # also for the workers this command starts


#: ``--no-cache``, the same in every command that reads traces (docs/performance.md "The cache")
no_cache_option = click.option(
    "--no-cache",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_no_cache,
    help=f"Neither read nor write the cache of decoded traces and analyses (as ${CACHE_DIR_ENV}=off).",
)


def show_cache_warnings() -> None:
    """Cache and engine warnings as the command's other warnings: ``traceprof: warning: ...``,
    one line."""
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, _command_warnings()):
            click.echo(f"traceprof: warning: {units.printable(str(message))}", err=True)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show


def _command_warnings() -> tuple[type[Warning], ...]:
    """The warning classes of the cache and the engines, of those imported: a module that is
    not imported has warned nothing (and is not imported to find out)."""
    found = []
    for module, name in (("traceprof.read.cache", "CacheWarning"), ("traceprof.engine", "EngineWarning")):
        if module in sys.modules:
            found.append(getattr(sys.modules[module], name))
    return tuple(found)


def print_warnings(warnings: Iterable[str]) -> None:
    """One line each on stderr, control characters of the names in them shown escaped."""
    for warning in warnings:
        click.echo(f"traceprof: warning: {units.printable(warning)}", err=True)


def emit(
    text: str | bytes, output: str | None, inputs: list[str], styled: Callable[[str], Any] | None = None
) -> None:
    """The result to ``-o`` (atomically) or standard output; ``styled``: the text's colours when
    standard output is a colour terminal. On a terminal any format (CSV and JSON too) shows its
    control characters escaped; the text formats have them escaped wherever they go."""
    from traceprof.output import STDOUT, write_output

    # a page made as bytes, on a terminal, is escaped there as any text (binary formats are
    # refused on a terminal before)
    if isinstance(text, bytes) and (not output or output == STDOUT) and sys.stdout.isatty():
        text = text.decode("utf-8")
    if isinstance(text, bytes) or (output and output != STDOUT):
        write_output(output or STDOUT, text, inputs=inputs)  # binary: -o checked before
    elif styled is not None and color_terminal():
        from rich.console import Console

        Console(highlight=False, soft_wrap=True).print(styled(units.printable(text)), end="")
    else:  # color=True: a pipe gets the text as it is, the bytes -o writes (click would strip ESC [)
        click.echo(units.printable(text) if sys.stdout.isatty() else text, nl=False, color=True)

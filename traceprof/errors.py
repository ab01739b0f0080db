"""Typed errors. Each carries a one-line message for the user and a process exit code.

The CLI prints ``traceprof: error: <message>`` and exits with ``exit_code``; it never shows a
traceback for these. :data:`EXIT_CODES` is the command's every exit code, each with one meaning
(the README and docs/security.md show it; a test holds them to it).
"""

from __future__ import annotations

import re

#: what a terminal acts on instead of showing: the C0 controls but the newline (ESC starts the
#: CSI and OSC sequences that move the cursor, clear the screen or set the window title; CR
#: overwrites the line; BEL), DEL, the C1 controls (0x9b is a one-byte CSI on some terminals),
#: the line and paragraph separators, the bidirectional embeddings, overrides and isolates that
#: reorder what is shown, and lone surrogates (a file name's undecodable bytes)
_CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED_CONTROLS = {"\t": "\\t", "\r": "\\r"}


def _escaped_control(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED_CONTROLS:
        return _NAMED_CONTROLS[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` for a person's terminal: every control character but the newline shown as an
    escape (``\\x1b``, ``\\r``, ``\\t``, ``\\u202e``), so that a name in a trace cannot
    move the cursor, clear the screen or set the window title. Other text is unchanged."""
    return _CONTROLS.sub(_escaped_control, text)


#: the exit codes of the ``traceprof`` command, each with one meaning
EXIT_CODES: dict[int, str] = {
    0: "done",
    1: "traceprof failed where it should not have: a bug (Python's traceback is shown; please report it)",
    2: "an input cannot be read or used: missing, not a trace, damaged, a module tree too deep, "
    "traces that are not the ranks of one job",
    3: "a bad option or argument, or one that does not fit the input",
    4: "an output cannot be written (or -o names an input; cache clear could not remove an entry)",
    5: "not enough memory: loading a trace would need more than --max-memory, or the memory ran out",
    6: "an optional dependency is missing (the message says what to install)",
    7: "a worker process ended while it held a trace (killed, often by the out-of-memory killer)",
    10: "diff --fail-if-slower: NEW is slower than allowed",
    130: "interrupted (Ctrl-C)",
    143: "terminated (SIGTERM)",
}


class TraceprofError(Exception):
    """Base of every error traceprof reports to its user. Its message is one line, its control
    characters shown escaped (:func:`printable`): it names files and modules a trace's writer
    chose, and reaches a terminal through the command line and through Python alike."""

    exit_code = 1

    def __init__(self, message: str):
        self.message = printable(" ".join(str(message).split()))  # always one line
        super().__init__(self.message)

    def __reduce__(self):
        # pickled as it is, whatever its constructor's arguments: an error raised in a worker
        # process (jobs, traceprof/engine.py) reaches the command as the same one-line error
        return (_restore, (type(self), self.message, dict(self.__dict__)))


def _restore(cls, message: str, state: dict) -> TraceprofError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    return error


class TraceReadError(TraceprofError):
    """The trace file cannot be read or is not a Kineto / Chrome trace."""

    exit_code = 2

    def __init__(self, path: object, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


class MemoryLimitError(TraceReadError):
    """Loading the trace would need more memory than the limit (``--max-memory``)."""

    exit_code = 5


class OptionError(TraceprofError):
    """An option value does not fit the trace (for example a step that is not in it)."""

    exit_code = 3


class OutputError(TraceprofError):
    """The result cannot be written where the user asked."""

    exit_code = 4


class MissingDependencyError(TraceprofError):
    """An optional dependency is not installed (for example the ``tensorboard`` extra)."""

    exit_code = 6


class JobError(TraceprofError):
    """The traces given do not make one job: ranks of different jobs mixed, a rank given twice
    or without a number, ranks without a step in common."""

    exit_code = 2


class ModuleLookupError(OptionError, KeyError):
    """No node, or several, answer a name given to ``find()``. A KeyError, as a failed lookup
    in a dict, and a TraceprofError whose one-line message names close matches."""

    def __init__(self, message: str, matches: tuple[str, ...] = (), suggestions: tuple[str, ...] = ()):
        super().__init__(message)
        self.matches = matches  # the nodes a name answered, when several did
        self.suggestions = suggestions  # names close to one that answered none

    def __str__(self) -> str:
        return self.message

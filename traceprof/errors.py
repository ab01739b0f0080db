"""Typed errors. Each carries a one-line message for the user and a process exit code.

The CLI prints ``traceprof: error: <message>`` and exits with ``exit_code``; it never shows a
traceback for these.
"""

from __future__ import annotations


class TraceprofError(Exception):
    """Base of every error traceprof reports to its user."""

    exit_code = 1

    def __init__(self, message: str):
        super().__init__(message)
        self.message = " ".join(str(message).split())  # always one line

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

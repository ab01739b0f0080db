"""Exit codes (issue 33, item 16): one table, each code one meaning, the same in
``traceprof.errors.EXIT_CODES``, the README and docs/security.md; every kind of error exits with a
code of the table; SIGTERM while the command still loads says one line and exits 143, as Ctrl-C
says its own (it ended the process without a word)."""

from __future__ import annotations

import re
import select
import signal
import subprocess
import sys
import time

import pytest

from traceprof import errors
from traceprof.cli.common import USAGE_EXIT_CODE
from traceprof.compare.diff import SLOWER_EXIT_CODE
from traceprof.engine import WorkerLostError

from .conftest import REPO, SAMPLE_TRACES

ROW = re.compile(r"^\| (\d+) \| (.+) \|$")


def table(doc: str) -> dict[int, str]:
    """The exit code table under a heading "Exit codes" of ``doc``."""
    text = (REPO / doc).read_text()
    section = text[text.index("Exit codes\n") :]
    rows = {}
    for line in section.splitlines()[1:]:
        if line.startswith("#"):
            break
        m = ROW.match(line)
        if m:
            rows[int(m.group(1))] = m.group(2)
    return rows


@pytest.mark.parametrize("doc", ["README.md", "docs/security.md"])
def test_the_table_of_exit_codes_is_the_same_everywhere(doc):
    assert table(doc) == errors.EXIT_CODES


def _kinds(cls):
    yield cls
    for sub in cls.__subclasses__():
        yield from _kinds(sub)


def test_every_kind_of_error_exits_with_a_code_of_the_table():
    import traceprof.cli  # noqa: F401 - every command's errors defined

    codes = {cls.__name__: cls.exit_code for cls in _kinds(errors.TraceprofError)}
    assert set(codes.values()) <= set(errors.EXIT_CODES)
    assert {USAGE_EXIT_CODE, SLOWER_EXIT_CODE, 130, 128 + signal.SIGTERM} <= set(errors.EXIT_CODES)
    # one meaning each: running out of memory, a bad option, an unreadable input, a lost worker
    assert errors.MemoryLimitError.exit_code == 5 and WorkerLostError.exit_code == 7  # before: both 5
    assert errors.MissingDependencyError.exit_code == 6  # before: in no table
    assert errors.OptionError.exit_code == USAGE_EXIT_CODE == 3
    assert errors.JobError.exit_code == errors.TraceReadError.exit_code == 2


def test_sigterm_while_the_command_loads_says_one_line():
    """SIGTERM once the package has started importing (-X importtime writes a line as each
    module is loaded)."""
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "traceprof", "analyze"]
        + [str(SAMPLE_TRACES / "lenet5_train_cpu.pt.trace.json.gz")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen, lines = False, []
    deadline = time.monotonic() + 60  # guards a hang only
    while not seen and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 1.0)
        if ready:
            line = proc.stderr.readline()
            lines.append(line)
            seen = "traceprof.startup" in line
    assert seen, "".join(lines[-5:])
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    proc.wait(timeout=60)
    said = [line for line in rest.splitlines() if not line.startswith("import time:")]
    assert proc.returncode == 143, rest[-2000:]  # before: -15, and nothing said
    assert said == ["traceprof: error: terminated"], said

"""Output safety: ``-o`` never destroys a file it should not touch and never leaves debris.

1. The input trace is never the output (same file by device and inode: the same name, a symlink,
   a hard link; ``.json`` and ``.json.gz``): a one-line error, the input byte-identical.
2. Devices and FIFOs are written in place, never renamed over; ``-o -`` is standard output. The
   devices are reached through symlinks in the test's directory: a writer that renames over its
   target then replaces the symlink, never the device (the tests may run as root).
3. Ctrl-C (SIGINT) or SIGTERM while the output is being written leaves no ``.traceprof-*.tmp``.
4. ``-o`` with an extension no format has is refused unless ``--format`` is given.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from .test_bad_input import REPO, assert_clean_error, run_cli
from .tracebuilder import TraceBuilder


def _small_trace() -> TraceBuilder:
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.scope("encoder", "Linear", 10, 50)
    b.op("aten::mm", 12, 20)
    b.launch(13, 40, 10)
    return b


@pytest.fixture(params=["json", "json.gz"])
def trace(tmp_path, request) -> Path:
    path = tmp_path / f"trace.{request.param}"
    return _small_trace().write(path, gz=request.param == "json.gz")


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".traceprof-"))


# -- 1. the input is never the output ----------------------------------------------------------


@pytest.mark.parametrize("spelling", ["same_name", "other_spelling", "symlink", "hard_link"])
def test_the_input_trace_is_never_the_output(tmp_path, trace, spelling):
    before = trace.read_bytes()
    if spelling == "same_name":
        out = trace
    elif spelling == "other_spelling":
        out = tmp_path / "." / trace.name
    elif spelling == "symlink":
        out = tmp_path / ("link." + trace.name.split(".", 1)[1])
        out.symlink_to(trace.name)
    else:
        out = tmp_path / ("hard." + trace.name.split(".", 1)[1])
        os.link(trace, out)
    proc = run_cli(trace, "-o", out)
    assert_clean_error(proc, out)
    assert proc.returncode == 4
    assert "is the input trace" in proc.stderr
    assert trace.read_bytes() == before
    if spelling == "symlink":
        assert out.is_symlink()
    assert _leftovers(tmp_path) == []


def test_a_trace_named_through_a_symlink_is_not_its_target_either(tmp_path, trace):
    link = tmp_path / "via_link.json"
    link.symlink_to(trace)
    before = trace.read_bytes()
    assert_clean_error(run_cli(link, "-o", trace), trace)
    assert trace.read_bytes() == before


def test_a_directory_as_output_is_one_error_line(tmp_path, trace):
    out = tmp_path / "reports"
    out.mkdir()
    proc = run_cli(trace, "-o", out)
    assert_clean_error(proc, out)
    assert proc.returncode == 4 and "is a directory" in proc.stderr
    assert list(out.iterdir()) == []


# -- 2. devices, FIFOs and standard output -----------------------------------------------------


def test_a_full_device_is_written_in_place_and_gives_one_error_line(tmp_path, trace):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    full = tmp_path / "full"
    full.symlink_to("/dev/full")
    proc = run_cli(trace, "-o", full)
    assert_clean_error(proc, full)
    assert proc.returncode == 4
    assert "No space left on device" in proc.stderr
    assert full.is_symlink() and stat.S_ISCHR(os.stat("/dev/full").st_mode)
    assert _leftovers(tmp_path) == []


def test_the_null_device_is_written_in_place(tmp_path, trace):
    null = tmp_path / "null"
    null.symlink_to(os.devnull)
    proc = run_cli(trace, "-o", null)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == ""
    assert null.is_symlink() and stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert _leftovers(tmp_path) == []


def test_a_fifo_is_written_in_place(tmp_path, trace):
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    # a reader that does not block: the small report fits in the pipe's buffer
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        proc = run_cli(trace, "-o", fifo)
        assert proc.returncode == 0, proc.stderr
        received = b""
        while chunk := os.read(reader, 1 << 16):
            received += chunk
    finally:
        os.close(reader)
    assert received.startswith(b"{") and b'"schema"' in received  # the format of .json
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _leftovers(tmp_path) == []


def test_dash_is_standard_output(tmp_path, trace):
    proc = run_cli(trace, "-o", "-", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("traceprof module profile")
    assert not (tmp_path / "-").exists()


def test_dash_takes_binary_formats_too(tmp_path, trace):
    pytest.importorskip("pyarrow")
    proc = subprocess.run(
        [sys.executable, "-m", "traceprof", "analyze", str(trace), "-f", "parquet", "-o", "-"],
        capture_output=True,
        cwd=tmp_path,
        env=_env(),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(b"PAR1") and proc.stdout.endswith(b"PAR1")
    assert not (tmp_path / "-").exists()


# -- 3. interrupted while writing ---------------------------------------------------------------

# Runs the command line with the temporary file written and its fsync held until a signal comes.
_HELD_WRITE = """
import os, signal, sys
from traceprof.cli import main

real_fsync = os.fsync

def fsync_then_wait_for_a_signal(fd):
    real_fsync(fd)
    print("writing", flush=True)
    signal.pause()

os.fsync = fsync_then_wait_for_a_signal
sys.argv = ["traceprof", "analyze", *sys.argv[1:]]
main()
"""


def _env() -> dict[str, str]:
    pythonpath = [str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]
    return dict(os.environ, PYTHONIOENCODING="utf-8", PYTHONPATH=os.pathsep.join(pythonpath))


@pytest.mark.parametrize(
    "signum, code, message",
    [
        (signal.SIGINT, 130, "interrupted"),
        (signal.SIGTERM, 143, "terminated"),
    ],
    ids=["SIGINT", "SIGTERM"],
)
def test_a_signal_while_writing_leaves_no_temporary_file(tmp_path, signum, code, message):
    trace = _small_trace().write(tmp_path / "trace.json")
    out = tmp_path / "report.json"
    out.write_text("previous report\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", _HELD_WRITE, str(trace), "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert proc.stdout.readline() == "writing\n", proc.stderr.read()
        assert len(_leftovers(tmp_path)) == 1  # the temporary file, written, not yet renamed
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code
    assert stderr.splitlines() == [f"traceprof: error: {message}"]
    assert _leftovers(tmp_path) == []
    assert out.read_text() == "previous report\n"


# -- 4. unknown extensions ----------------------------------------------------------------------


def test_an_unknown_extension_is_refused(tmp_path, trace):
    out = tmp_path / "report.xlsx"
    proc = run_cli(trace, "-o", out)
    assert_clean_error(proc, out)
    assert proc.returncode == 3
    for extension in (".txt", ".json", ".csv", ".html", ".parquet"):
        assert extension in proc.stderr
    assert not out.exists()


def test_an_unknown_extension_is_written_with_an_explicit_format(tmp_path, trace):
    out = tmp_path / "report.xlsx"
    proc = run_cli(trace, "-o", out, "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().startswith("id,parent,depth")


def test_a_name_without_extension_gets_the_tree(tmp_path, trace):
    out = tmp_path / "report"
    proc = run_cli(trace, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().startswith("traceprof module profile")


def test_gz_output_is_not_taken_for_json(tmp_path, trace):
    out = tmp_path / "report.json.gz"
    assert_clean_error(run_cli(trace, "-o", out), out)
    assert not out.exists()


def test_a_replaced_output_keeps_its_permissions(tmp_path, trace):
    out = tmp_path / "report.json"
    out.write_text("old")
    out.chmod(0o600)
    assert run_cli(trace, "-o", out).returncode == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600

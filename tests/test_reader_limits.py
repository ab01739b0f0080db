"""The reader on hostile or odd input: one test per class of problem, inputs built here.

- JSON nested deeper than the decoder goes: skipped where traceprof does not read it, a clean
  error where it does;
- memory: gzip and event bombs, ``/dev/zero``, endless FIFOs stop at the (lowered) limit with one
  line naming it; the limit option, environment variable and sizes;
- events dropped (malformed, no timestamp, repeated ``traceEvents``) are counted in a warning, and
  a trace with no usable event is an error;
- repairs of times (negative or missing durations, absurd timestamps) are said, never silent;
- a UTF-8 byte order mark is accepted; UTF-16 is named.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import pytest

import traceprof
from traceprof import TraceReadError
from traceprof.errors import MemoryLimitError, OptionError
from traceprof.read import limits
from traceprof.tensorboard.tb_profiler import tb_profiler_copy

from .tracebuilder import TraceBuilder

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    pythonpath = [str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]
    full_env = dict(os.environ, PYTHONIOENCODING="utf-8", PYTHONPATH=os.pathsep.join(pythonpath))
    full_env.pop(limits.ENV_VAR, None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "traceprof", *map(str, args)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        env=full_env,
        timeout=timeout,
    )


def assert_one_line_error(proc, path, code: int) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith(f"traceprof: error: {path}: "), lines[0]
    return lines[0]


def small_trace() -> TraceBuilder:
    """A step with a module scope, an op and a kernel: every stage has something to do."""
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.scope("", "Net", 1, 90)
    b.op("aten::mm", 2, 20)
    b.launch(3, 10, 30)
    b.step(2, 100, 100)
    b.scope("", "Net", 101, 90)
    b.op("aten::mm", 102, 20)
    b.launch(103, 110, 30)
    return b


def write(path: Path, data: bytes | str, gz: bool = False) -> Path:
    data = data.encode() if isinstance(data, str) else data
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


# -- 4. nesting deeper than the decoder goes ----------------------------------------------------

DEEP = "[" * 5000 + "]" * 5000
DEEP_OBJECT = '{"a":' * 3000 + "1" + "}" * 3000


def _with_deep_values(doc: dict, marker_value: str = DEEP) -> str:
    """The trace as JSON with "@DEEP@" markers replaced by a value nested 5,000 levels deep."""
    return json.dumps(doc).replace('"@DEEP@"', marker_value)


@pytest.mark.parametrize(
    "where", ["unread_arg", "unread_field", "unread_top_level_key", "object_before_events", "bare_array"]
)
def test_deep_values_traceprof_does_not_read_are_skipped(tmp_path, where):
    b = small_trace()
    reference = traceprof.analyze(b.write(tmp_path / "ref.json"))
    doc = b.document()
    if where == "unread_arg":
        for e in doc["traceEvents"]:
            e["args"]["user stuff"] = "@DEEP@"
    elif where == "unread_field":
        doc["traceEvents"][2]["zz"] = "@DEEP@"
    elif where == "unread_top_level_key":
        doc["user_metadata"] = "@DEEP@"
    elif where == "object_before_events":
        doc = {"meta": "@DEEP@", **doc}
    else:
        doc = doc["traceEvents"]
        doc[2]["args"]["x"] = "@DEEP@"
    text = _with_deep_values(doc, DEEP_OBJECT if where == "object_before_events" else DEEP)
    path = write(tmp_path / "deep.json", text)
    profile = traceprof.analyze(path)
    profile.self_check()
    assert profile.selection.gpu_busy_us == reference.selection.gpu_busy_us
    assert [n.qualified_name for n in profile.nodes] == [n.qualified_name for n in reference.nodes]
    proc = run_cli("analyze", path, "--format", "json")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    # the TensorBoard copy reads the whole document: it skips them too
    _copy, stats = tb_profiler_copy(path)
    assert stats.events == len(b.events)


def test_deep_entry_of_the_event_array_is_dropped_and_counted(tmp_path):
    doc = small_trace().document()
    doc["traceEvents"].append("@DEEP@")
    path = write(tmp_path / "deep_entry.json", _with_deep_values(doc))
    trace = traceprof.load_trace(path)
    assert len(trace.events) == len(doc["traceEvents"]) - 1
    assert "1 event dropped: 1 not a JSON object" in trace.metadata.warnings


def test_brackets_and_quotes_inside_strings_do_not_count_as_nesting(tmp_path):
    doc = small_trace().document()
    doc["traceEvents"][2]["args"]["note"] = 'a "quoted" [[{{ \\" ]]'
    doc["traceEvents"][2]["args"]["deep"] = "@DEEP@"
    doc["traceEvents"][3]["args"]["tail"] = '\\\\"]]]'
    path = write(tmp_path / "strings.json", _with_deep_values(doc))
    trace = traceprof.load_trace(path)
    assert len(trace.events) == len(doc["traceEvents"])


@pytest.mark.parametrize(
    "where, named", [("Input Dims", '"Input Dims"'), ("ts", '"ts"'), ("traceprof", 'top-level "traceprof"')]
)
def test_deep_value_traceprof_reads_is_a_clean_error(tmp_path, where, named):
    doc = small_trace().document()
    if where == "traceprof":
        doc["traceprof"] = "@DEEP@"
    elif where == "ts":
        doc["traceEvents"][2]["ts"] = "@DEEP@"
    else:
        doc["traceEvents"][2]["args"]["Input Dims"] = "@DEEP@"
    path = write(tmp_path / "deep_needed.json", _with_deep_values(doc))
    line = assert_one_line_error(run_cli("analyze", path), path, TraceReadError.exit_code)
    assert named in line and "nested more than" in line
    with pytest.raises(TraceReadError):
        traceprof.load_trace(path)


# -- 5. memory: bombs, endless streams, the limit ----------------------------------------------


def _gzip_stream(parts, repeat: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    head, body, tail = parts
    out = [c.compress(head)] + [c.compress(body) for _ in range(repeat)]
    return b"".join(out + [c.compress(tail), c.flush()])


EVENT_BOMB = (b'{"traceEvents":[', b'{"ph":"X"},' * 100_000, b'{"ph":"X"}]}')  # 1.1 MB a body


@pytest.fixture
def inflated(monkeypatch) -> list[int]:
    """The bytes of JSON the reader inflates in this process (``inflated[0]``): how far a load
    got, counted instead of timed (tests/test_no_duration_asserts.py)."""
    from traceprof.read import load, source

    count = [0]
    inflate = source.inflate

    def counting(*args, **kwargs):
        for chunk in inflate(*args, **kwargs):
            count[0] += len(chunk)
            yield chunk

    monkeypatch.setattr(source, "inflate", counting)
    monkeypatch.setattr(load, "inflate", counting)
    return count


def test_event_bomb_stops_at_the_limit(tmp_path, inflated):
    """A small .gz of millions of minimal events: stopped before it is inflated."""
    path = write(tmp_path / "bomb.json.gz", _gzip_stream(EVENT_BOMB, 60))  # 66 MB of JSON
    assert path.stat().st_size < 300_000
    proc = run_cli("analyze", path, "--max-memory", "50M")
    line = assert_one_line_error(proc, path, MemoryLimitError.exit_code)
    assert "memory limit of 50.0 MB" in line and "--max-memory" in line
    with pytest.raises(MemoryLimitError):
        traceprof.load_trace(path, max_memory="50M", cache=False)
    assert 0 < inflated[0] < 66_000_000 // 2  # stopped before half of it is inflated


def test_event_bomb_stops_while_inflating(tmp_path):
    """Without a usable size in the gzip trailer (two members), the JSON is counted as it is
    inflated: the events, not only the bytes, pass the limit."""
    one = _gzip_stream(EVENT_BOMB[:1] + (EVENT_BOMB[1], b""), 30)
    two = _gzip_stream((b"", EVENT_BOMB[1], EVENT_BOMB[2]), 30)
    path = write(tmp_path / "bomb2.json.gz", one + two + b"\0" * 8)  # trailer: size 0
    with pytest.raises(MemoryLimitError) as e:
        traceprof.load_trace(path, max_memory="200M")
    # 4.5 bytes per byte of JSON would let 44 MB of it in; 700 bytes per event stops it first
    assert "200 MB" in e.value.message and "bytes per byte" in e.value.message


def test_gzip_bomb_of_zeros_is_refused_at_once(tmp_path, inflated):
    path = write(tmp_path / "zeros.json.gz", _gzip_stream((b"", b"\0" * (1 << 24), b""), 64))
    with pytest.raises(TraceReadError, match="NUL bytes"):
        traceprof.load_trace(path, cache=False)
    assert 0 < inflated[0] <= (1 << 30) // 32  # 1 GB of zeros is not inflated: its first chunk


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_dev_zero_is_refused_at_once():
    proc = run_cli("analyze", "/dev/zero", timeout=30)
    line = assert_one_line_error(proc, "/dev/zero", TraceReadError.exit_code)
    assert "not JSON" in line


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
@pytest.mark.parametrize("gz", [False, True])
def test_endless_fifo_stops_at_the_limit(tmp_path, gz):
    """A stream that never ends (valid JSON as far as it goes) stops at the limit."""
    fifo = tmp_path / "endless.json"
    os.mkfifo(fifo)
    stop = threading.Event()

    def feed():
        c = zlib.compressobj(6, zlib.DEFLATED, 31) if gz else None
        body = b'{"ph":"X","ts":1,"dur":1,"name":"op","cat":"cpu_op"},' * 10_000
        try:
            with open(fifo, "wb") as f:
                f.write(c.compress(b"[") if c else b"[")
                while not stop.is_set():
                    f.write(c.compress(body) if c else body)
        except (BrokenPipeError, OSError):
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        with pytest.raises(MemoryLimitError, match=r"memory limit of 30\.0 MB"):
            traceprof.load_trace(fifo, max_memory="30M")
    finally:
        stop.set()
        writer.join(10)


def test_plain_file_over_the_limit_is_refused_before_reading(tmp_path):
    path = small_trace().write(tmp_path / "t.json")
    limit = path.stat().st_size  # the JSON alone fits; the memory it needs does not
    with pytest.raises(MemoryLimitError) as e:
        traceprof.load_trace(path, max_memory=limit)
    assert str(path) in e.value.message
    traceprof.load_trace(path, max_memory=limit * 100)


def test_limit_from_the_environment(tmp_path):
    path = small_trace().write(tmp_path / "t.json")
    proc = run_cli("analyze", path, env={limits.ENV_VAR: "1K"})
    assert_one_line_error(proc, path, MemoryLimitError.exit_code)
    proc = run_cli("analyze", path, env={limits.ENV_VAR: "lots"})
    assert proc.returncode == OptionError.exit_code and limits.ENV_VAR in proc.stderr
    assert (
        run_cli("analyze", path, "--max-memory", "1G", env={limits.ENV_VAR: "1K"}).returncode == 0
    )  # the option wins


def test_tensorboard_command_has_the_limit(tmp_path):
    proc = run_cli("tensorboard", "--help")
    assert "--max-memory" in proc.stdout


def test_tensorboard_copy_counts_twice_the_memory(tmp_path):
    """A TensorBoard run holds the analyzed trace and a decoded copy of it at once."""
    path = small_trace().write(tmp_path / "t.json")
    budget = limits.MemoryBudget(path, None)
    budget.add(path.read_bytes())
    need = budget.estimate()
    traceprof.load_trace(path, max_memory=int(need * 1.5))
    with pytest.raises(MemoryLimitError):
        tb_profiler_copy(path, max_memory=int(need * 1.5))
    tb_profiler_copy(path, max_memory=int(need * 2.5))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("8G", 8 * 10**9),
        ("500M", 500 * 10**6),
        ("1.5GB", 1.5e9),
        ("12GiB", 12 * 2**30),
        ("64k", 64_000),
        ("1000", 1000),
        (" 2 t ", 2 * 10**12),
        (4096, 4096),
    ],
)
def test_parse_size(text, expected):
    assert limits.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "G", "-5M", "0", "5X", "1.2.3G", "lots"])
def test_parse_size_refuses(text):
    with pytest.raises(ValueError):
        limits.parse_size(text)


def test_default_limit_follows_the_available_memory(monkeypatch):
    monkeypatch.delenv(limits.ENV_VAR, raising=False)
    assert limits.resolve_max_memory(None) > 0
    available = limits.available_memory()
    assert available is None or available > 0
    monkeypatch.setattr(limits, "available_memory", lambda: 10 * 10**9)
    assert limits.resolve_max_memory(None) == 8 * 10**9  # 80%
    monkeypatch.setattr(limits, "available_memory", lambda: None)
    assert limits.resolve_max_memory(None) == limits.FALLBACK_LIMIT
    monkeypatch.setenv(limits.ENV_VAR, "3G")
    assert limits.resolve_max_memory(None) == 3 * 10**9
    assert limits.resolve_max_memory("2G") == 2 * 10**9


# -- 8. dropped events are counted; no usable event is an error ---------------------------------


@pytest.mark.parametrize(
    "events, says",
    [
        ([{"ph": "X", "ts": "abc", "dur": None, "name": 7}], "with a name that is not a string"),
        ([{"ph": "X", "cat": "cpu_op", "name": "a", "dur": 1}] * 3, "3 without a valid timestamp"),
        ([], "no events"),
        (
            [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}],
            "no usable event",
        ),
    ],
)
def test_no_usable_event_is_an_error(tmp_path, events, says):
    path = write(tmp_path / "nothing.json", json.dumps({"traceEvents": events}))
    line = assert_one_line_error(run_cli("analyze", path), path, TraceReadError.exit_code)
    assert says in line


def test_dropped_events_are_counted_by_reason_in_every_format(tmp_path):
    doc = small_trace().document()
    doc["traceEvents"] += [
        {"ph": "X", "cat": "cpu_op", "name": "no_ts", "pid": 100, "tid": 1, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "bad_ts", "pid": 100, "tid": 1, "ts": "x", "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": 7, "pid": 100, "tid": 1, "ts": 5, "dur": 1},
        [1, 2],
    ]
    path = write(tmp_path / "dropped.json", json.dumps(doc))
    expected = (
        "4 events dropped: 2 without a valid timestamp, 1 not a JSON object, "
        "1 with a name that is not a string"
    )
    trace = traceprof.load_trace(path)
    assert expected in trace.metadata.warnings
    tree = run_cli("analyze", path)
    assert tree.returncode == 0 and f"warning:   {expected}" in tree.stdout, tree.stdout
    as_json = run_cli("analyze", path, "--format", "json")
    assert expected in json.loads(as_json.stdout)["warnings"]


def test_repeated_trace_events_key_does_not_empty_the_trace(tmp_path):
    events = json.dumps(small_trace().events)
    path = write(tmp_path / "dup.json", f'{{"traceEvents": {events}, "traceEvents": []}}')
    trace = traceprof.load_trace(path)
    assert len(trace.events) == len(small_trace().events)
    assert any('"traceEvents" appears 2 times' in w for w in trace.metadata.warnings)
    # both with events: which is the trace cannot be told
    path = write(tmp_path / "dup2.json", f'{{"traceEvents": {events},\n "traceEvents": {events}}}')
    line = assert_one_line_error(run_cli("analyze", path), path, TraceReadError.exit_code)
    assert "appears 2 times" in line


def test_repeated_top_level_key_that_is_read_is_said(tmp_path):
    events = json.dumps(small_trace().events)
    path = write(
        tmp_path / "dup.json",
        f'{{"schemaVersion": 1, "traceEvents": {events}, "schemaVersion": 2, "x": 1, "x": 2}}',
    )
    trace = traceprof.load_trace(path)
    assert trace.metadata.schema_version == 2
    assert any('"schemaVersion" (2 times)' in w for w in trace.metadata.warnings)
    assert not any('"x"' in w for w in trace.metadata.warnings)  # not read: not worth a word


# -- 9. repairs of times are said ---------------------------------------------------------------


def test_negative_durations_are_said_with_their_total(tmp_path):
    b = small_trace()
    kernels = [e for e in b.events if e["cat"] == "kernel"]
    kernels[0]["dur"] = -55.4
    kernels[1]["dur"] = -10
    trace = traceprof.load_trace(b.write(tmp_path / "neg.json"))
    assert "2 events with a negative duration set to 0 (their total -65.4 us)" in trace.metadata.warnings
    assert not (trace.events.dur < 0).any()


def test_missing_duration_of_a_complete_event_is_said(tmp_path):
    b = small_trace()
    del b.events[2]["dur"]
    trace = traceprof.load_trace(b.write(tmp_path / "nodur.json"))
    assert "1 complete event without a valid duration taken as 0" in trace.metadata.warnings


@pytest.mark.parametrize("ts", [1e30, -5e15, 2.0**60, 1e11 + 1e10])
def test_absurd_timestamps_drop_their_events_only(tmp_path, ts):
    b = small_trace()
    reference = traceprof.analyze(b.write(tmp_path / "ref.json"))
    b.launch(50, ts, 5, name="far_kernel", with_runtime=False)
    profile = traceprof.analyze(b.write(tmp_path / "far.json"))
    assert "1 event dropped: 1 with a timestamp out of range" in profile.warnings
    assert profile.selection.gpu_busy_us == reference.selection.gpu_busy_us
    assert profile.selection.numbers == reference.selection.numbers


def test_absurd_duration_drops_its_event(tmp_path):
    b = small_trace()
    b.launch(50, 60, 1e300, name="forever", with_runtime=False)
    trace = traceprof.load_trace(b.write(tmp_path / "long.json"))
    assert "1 event dropped: 1 with a duration out of range" in trace.metadata.warnings
    assert "forever" not in [trace.events.names[i] for i in trace.events.name]


def test_clean_trace_has_no_reader_warnings(tmp_path):
    trace = traceprof.load_trace(small_trace().write(tmp_path / "clean.json"))
    assert trace.metadata.warnings == ()


# -- 10. byte order marks and UTF-16 ------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True])
def test_utf8_byte_order_mark_is_accepted(tmp_path, gz):
    b = small_trace()
    data = b"\xef\xbb\xbf" + json.dumps(b.document()).encode()
    path = write(tmp_path / ("bom.json.gz" if gz else "bom.json"), data, gz)
    trace = traceprof.load_trace(path)
    assert len(trace.events) == len(b.events)
    assert run_cli("analyze", path).returncode == 0


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
@pytest.mark.parametrize("gz", [False, True])
def test_utf16_is_named(tmp_path, encoding, gz):
    data = json.dumps(small_trace().document()).encode(encoding)
    path = write(tmp_path / "u16.json", data, gz)
    line = assert_one_line_error(run_cli("analyze", path), path, TraceReadError.exit_code)
    assert "is UTF-16 text" in line and "iconv -f UTF-16 -t UTF-8" in line

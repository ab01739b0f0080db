"""Bad input: every unreadable or odd trace ends in one clean error line, never a traceback.

- CLI (a subprocess per case): missing files, directories, empty and corrupt gzip, truncated and
  invalid JSON, JSON that is not a trace, events with missing fields or odd value types.
- The input file is never touched, and ``-o FILE`` is atomic: a failed run leaves no file behind.
- Property-based (hypothesis): truncated, byte-mutated and randomly generated traces either
  analyze cleanly (and pass ``self_check``) or raise :class:`traceprof.TraceprofError`.
- A 50 MB event name.

The real traces live in ``shared/traces`` beside the repository (CI clones the repository next to
``shared/``); the tests that need them are skipped when it is missing.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import traceprof  # noqa: E402
from traceprof import TraceprofError, TraceReadError, render  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces"
SMALL = TRACES / "small" / "mi250_minitoy_training.json.gz"
CPU_ONLY = TRACES / "cpu_only" / "cpu_only_rank34.pt.trace.json.gz"

needs_traces = pytest.mark.skipif(
    not (SMALL.is_file() and CPU_ONLY.is_file()), reason=f"real traces not found under {TRACES}"
)

ERROR_PREFIX = "traceprof: error: "


# -- helpers -----------------------------------------------------------------------------------


def run_cli(*args: str | os.PathLike, cwd: Path | None = None) -> subprocess.CompletedProcess:
    # this checkout's traceprof, whatever the working directory (and whether it is installed)
    pythonpath = [str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]
    env = dict(os.environ, PYTHONIOENCODING="utf-8", PYTHONPATH=os.pathsep.join(pythonpath))
    env.pop("PYTHONWARNINGS", None)
    return subprocess.run(
        [sys.executable, "-m", "traceprof", "analyze", *map(str, args)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        cwd=cwd,
        env=env,
        timeout=60,
    )


def run_cli_batch(cases: dict[str, tuple]) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """Run the CLI on many cases at once (case -> (path, *options)): case -> (path, result)."""
    workers = max(2, min(8, 2 * (os.cpu_count() or 1)))
    with ThreadPoolExecutor(workers) as pool:
        futures = {case: pool.submit(run_cli, *args) for case, args in cases.items()}
        return {case: (cases[case][0], f.result()) for case, f in futures.items()}


def assert_clean_error(proc: subprocess.CompletedProcess, path: Path | str) -> None:
    assert proc.returncode != 0, f"expected a failure, got exit 0; stdout={proc.stdout[:500]!r}"
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, f"stderr is not one line: {proc.stderr!r}"
    assert proc.stderr.endswith("\n")
    assert lines[0].startswith(ERROR_PREFIX), lines[0]
    assert str(path) in lines[0], f"{path} not in {lines[0]!r}"
    assert proc.stdout == "", proc.stdout[:500]


def assert_success(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip(), "no output"
    # the profile's warnings reach stderr for formats without a place for them (CSV, Parquet)
    other = [line for line in proc.stderr.splitlines() if not line.startswith("traceprof: warning: ")]
    assert not other, f"unexpected stderr (warnings?): {proc.stderr[:1000]!r}"


def read_json(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def dump(doc) -> bytes:
    return json.dumps(doc).encode("utf-8")


def first_event(doc: dict, ph: str = "X", cat: str | None = None) -> dict:
    for e in doc["traceEvents"]:
        if e.get("ph") == ph and (cat is None or e.get("cat") == cat):
            return e
    raise LookupError((ph, cat))


@pytest.fixture(scope="module")
def small_doc() -> dict:
    if not SMALL.is_file():
        pytest.skip(f"{SMALL} not found")
    return read_json(SMALL)


@pytest.fixture(scope="module")
def small_json() -> bytes:
    if not SMALL.is_file():
        pytest.skip(f"{SMALL} not found")
    return gzip.decompress(SMALL.read_bytes())


# -- 1. CLI: unreadable files ------------------------------------------------------------------


def _truncated_gzip(small_json: bytes) -> bytes:
    gz = gzip.compress(small_json)
    return gz[: len(gz) // 2]


def _corrupt_gzip_crc(small_json: bytes) -> bytes:
    gz = bytearray(gzip.compress(small_json))
    gz[-8] ^= 0xFF  # CRC32 in the trailer
    return bytes(gz)


BAD_FILES = {
    "empty": lambda j: b"",
    "whitespace_only": lambda j: b"  \n\t \n",
    "empty_gzip": lambda j: gzip.compress(b""),
    "gzip_of_whitespace": lambda j: gzip.compress(b"   \n"),
    "gzip_magic_only": lambda j: b"\x1f\x8b",
    "truncated_gzip": _truncated_gzip,
    "gzip_bad_crc": _corrupt_gzip_crc,
    "truncated_json": lambda j: j[: len(j) // 2],
    "truncated_json_gzip": lambda j: gzip.compress(j[: len(j) // 2]),
    "truncated_json_first_bytes": lambda j: j[:1],
    "random_text": lambda j: b"Lorem ipsum dolor sit amet, this is not a trace\n",
    "binary_garbage": lambda j: bytes(range(256)) * 8,
    "binary_after_bracket": lambda j: b"[" + bytes(range(256)),
    "binary_after_brace": lambda j: b"{\x00\x01\x02\xff\xfe",
    "json_number": lambda j: b"5",
    "json_string": lambda j: b'"a string"',
    "json_null": lambda j: b"null",
    "json_true": lambda j: b"true",
    "empty_object": lambda j: b"{}",
    "object_without_events": lambda j: b'{"schemaVersion": 1, "events": []}',
    "trace_events_number": lambda j: b'{"traceEvents": 5}',
    "trace_events_string": lambda j: b'{"traceEvents": "x"}',
    "trace_events_object": lambda j: b'{"traceEvents": {"ph": "X"}}',
    "trace_events_null": lambda j: b'{"traceEvents": null}',
    "trace_events_not_events": lambda j: b'{"traceEvents": [1, "x", null]}',
    "bare_array_not_events": lambda j: b'[1, "x", null, [], true]',
    "trailing_garbage": lambda j: j + b"\n}}} garbage",
    "two_documents": lambda j: j + j,
    "nan_literal": lambda j: b'{"traceEvents": [{"ph": "X", "ts": NaN}]}',
}


@pytest.fixture(scope="module")
def bad_file_runs(tmp_path_factory, small_json):
    directory = tmp_path_factory.mktemp("bad_files")
    cases = {}
    for case, make in BAD_FILES.items():
        # the content decides, not the name: gzip cases are named .json, the others .json.gz
        path = directory / f"bad_{case}{'.json' if 'gzip' in case else '.json.gz'}"
        path.write_bytes(make(small_json))
        cases[case] = (path,)
    return run_cli_batch(cases)


@needs_traces
@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_cli_bad_file(bad_file_runs, case):
    path, proc = bad_file_runs[case]
    assert_clean_error(proc, path)


@pytest.mark.parametrize("gz", [False, True])
def test_cli_lone_surrogate_escape(tmp_path, gz):
    """A lone surrogate escape is valid JSON syntax but no valid text: the trace is refused
    cleanly, or analyzed and printed."""
    data = b'[{"ph": "X", "cat": "cpu_op", "name": "a\\ud800b", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]'
    path = tmp_path / "surrogate.json"
    path.write_bytes(gzip.compress(data) if gz else data)
    proc = run_cli(path)
    if proc.returncode:
        assert_clean_error(proc, path)
    else:
        assert_success(proc)


def test_cli_missing_file(tmp_path):
    path = tmp_path / "does_not_exist.json.gz"
    proc = run_cli(path)
    assert_clean_error(proc, path)
    assert proc.returncode == TraceReadError.exit_code


def test_cli_directory(tmp_path):
    path = tmp_path / "a_directory.json"
    path.mkdir()
    proc = run_cli(path)
    assert_clean_error(proc, path)
    assert proc.returncode == TraceReadError.exit_code


def test_cli_relative_path_in_message(tmp_path):
    (tmp_path / "rel.json").write_bytes(b"not json")
    proc = run_cli("rel.json", cwd=tmp_path)
    assert_clean_error(proc, "rel.json")


# -- 1. CLI: odd events, on a real trace with one event changed ---------------------------------


def _del(key):
    def edit(ev):
        del ev[key]

    return edit


def _set(key, value):
    def edit(ev):
        ev[key] = value

    return edit


def _set_arg(key, value):
    def edit(ev):
        ev.setdefault("args", {})[key] = value

    return edit


# (name, event selector (ph, cat), edit)
ODD_EVENTS = [
    ("no_ts_kernel", ("X", "kernel"), _del("ts")),
    ("no_ts_op", ("X", "cpu_op"), _del("ts")),
    ("no_ph", ("X", "cpu_op"), _del("ph")),
    ("no_name", ("X", "cpu_op"), _del("name")),
    ("no_cat", ("X", "kernel"), _del("cat")),
    ("no_dur", ("X", "cpu_op"), _del("dur")),
    ("no_pid_tid", ("X", "cpu_op"), lambda ev: (ev.pop("pid"), ev.pop("tid"))),
    ("no_args", ("X", "kernel"), _del("args")),
    ("ts_string", ("X", "cpu_op"), _set("ts", "12")),
    ("ts_bad_string", ("X", "cpu_op"), _set("ts", "twelve")),
    ("ts_null", ("X", "kernel"), _set("ts", None)),
    ("ts_bool", ("X", "cpu_op"), _set("ts", True)),
    ("ts_object", ("X", "cpu_op"), _set("ts", {"us": 1})),
    ("ts_huge", ("X", "cpu_op"), _set("ts", 1e300)),
    ("ts_negative", ("X", "cpu_op"), _set("ts", -5e15)),
    ("dur_null", ("X", "cpu_op"), _set("dur", None)),
    ("dur_negative", ("X", "kernel"), _set("dur", -10)),
    ("dur_string", ("X", "kernel"), _set("dur", "3.5")),
    ("dur_huge", ("X", "kernel"), _set("dur", 1e300)),
    ("tid_list", ("X", "cpu_op"), _set("tid", [1, 2])),
    ("pid_object", ("X", "kernel"), _set("pid", {"a": 1})),
    ("pid_float", ("X", "cpu_op"), _set("pid", 1.5)),
    ("tid_bool", ("X", "cpu_op"), _set("tid", False)),
    ("name_number", ("X", "cpu_op"), _set("name", 42)),
    ("name_null", ("X", "cpu_op"), _set("name", None)),
    ("ph_number", ("X", "cpu_op"), _set("ph", 7)),
    ("cat_list", ("X", "cpu_op"), _set("cat", ["cpu_op"])),
    ("args_list", ("X", "kernel"), _set("args", [1, 2, 3])),
    ("args_string", ("X", "cpu_op"), _set("args", "args")),
    ("input_dims_string", ("X", "cpu_op"), _set_arg("Input Dims", "[[2, 3]]")),
    ("input_dims_nested", ("X", "cpu_op"), _set_arg("Input Dims", [[[[[]]]], {"a": None}])),
    ("correlation_string", ("X", "kernel"), _set_arg("correlation", "17")),
    ("correlation_float", ("X", "kernel"), _set_arg("correlation", 17.5)),
    ("correlation_null", ("X", "kernel"), _set_arg("correlation", None)),
    ("correlation_huge", ("X", "kernel"), _set_arg("correlation", 2**64 + 1)),
    ("external_id_huge_negative", ("X", "cpu_op"), _set_arg("External id", -(2**70))),
    ("sequence_number_huge", ("X", "cpu_op"), _set_arg("Sequence number", 10**30)),
    ("fwd_thread_id_list", ("X", "cpu_op"), _set_arg("Fwd thread id", [1])),
    ("stream_huge", ("X", "kernel"), _set_arg("stream", 2**63)),
    ("flow_id_huge", ("s", None), _set("id", 2**64)),
    ("flow_id_object", ("s", None), _set("id", {"x": 1})),
    ("flow_id_float", ("f", None), _set("id", 3.25)),
    ("step_number_huge", ("X", "user_annotation"), _set("name", "ProfilerStep#" + "9" * 40)),
    ("metadata_name_list", ("M", None), _set_arg("name", ["thread"])),
]


@pytest.fixture(scope="module")
def odd_event_runs(tmp_path_factory, small_doc):
    directory = tmp_path_factory.mktemp("odd_events")
    cases = {}
    for case, select, edit in ODD_EVENTS:
        doc = copy.deepcopy(small_doc)
        edit(first_event(doc, *select))
        path = directory / f"odd_{case}.json"
        path.write_bytes(dump(doc))
        cases[case] = (path, "--format", "json")
    return run_cli_batch(cases)


@needs_traces
@pytest.mark.parametrize("case", [c[0] for c in ODD_EVENTS])
def test_cli_odd_event_values(odd_event_runs, case):
    """Events with missing fields or values of unusual types: the event is coerced or skipped
    and the analysis goes on."""
    _path, proc = odd_event_runs[case]
    assert_success(proc)
    json.loads(proc.stdout)


@needs_traces
def test_cli_every_event_without_ts(tmp_path, small_doc):
    """No event left to analyze is an error that says why, not an empty report."""
    doc = copy.deepcopy(small_doc)
    for e in doc["traceEvents"]:
        e.pop("ts", None)
    path = tmp_path / "no_ts_anywhere.json"
    path.write_bytes(dump(doc))
    proc = run_cli(path)
    assert_clean_error(proc, path)
    assert proc.returncode == TraceReadError.exit_code
    assert "without a valid timestamp" in proc.stderr


@needs_traces
def test_cli_top_level_values_of_odd_types(tmp_path, small_doc):
    doc = copy.deepcopy(small_doc)
    doc.update(
        schemaVersion="one",
        deviceProperties={"not": "a list"},
        distributedInfo=[1, 2],
        baseTimeNanoseconds=2**70,
        record_shapes="yes",
        traceprof="not base64 !!",
    )
    path = tmp_path / "odd_top.json"
    path.write_bytes(dump(doc))
    assert_success(run_cli(path))


@needs_traces
@pytest.mark.parametrize(
    "table",
    [
        {"format": "traceprof.modules", "modules": 5},
        {"format": "traceprof.modules", "modules": [1, "x"]},
        {"format": "traceprof.modules", "modules": [], "version": "v2"},
        {"format": "traceprof.modules", "modules": [], "version": 2**70},
        {"format": "traceprof.modules", "modules": [{"name": [], "class": {}}]},
        [1, 2, 3],
        12,
        "eyJmb3JtYXQiOiA1fQ==",  # base64 of {"format": 5}
        "//79",  # base64 of invalid UTF-8
        # Python's JSON reads Infinity: a count, a rank or the version that is infinite
        "eyJmb3JtYXQiOiJ0cmFjZXByb2YubW9kdWxlcyIsIm1vZHVsZXMiOlt7Im5hbWUiOiIiLCJjbGFzcyI6Ik4iLCJwYXJhbXMiOkluZmluaXR5fV0sInJhbmsiOi1JbmZpbml0eX0=",
        "eyJmb3JtYXQiOiJ0cmFjZXByb2YubW9kdWxlcyIsIm1vZHVsZXMiOltdLCJ2ZXJzaW9uIjpJbmZpbml0eX0=",
    ],
)
def test_cli_module_table_of_odd_shapes(tmp_path, small_doc, table):
    doc = copy.deepcopy(small_doc)
    doc["traceprof"] = table
    path = tmp_path / "odd_table.json"
    path.write_bytes(dump(doc))
    assert_success(run_cli(path))


@needs_traces
@pytest.mark.parametrize("gz", [False, True])
def test_cli_invalid_utf8_in_name_is_replaced(tmp_path, small_doc, gz):
    """Invalid UTF-8 in an event name (seen in python_function names) is replaced with U+FFFD;
    the trace still analyzes."""
    doc = copy.deepcopy(small_doc)
    # a top-level CPU op of its own, so that its name shows up as a group of the output
    marker = "BADNAMEMARKER"
    step = next(
        e
        for e in doc["traceEvents"]
        if e.get("name") == "ProfilerStep#1" and e.get("cat") == "user_annotation"
    )
    doc["traceEvents"].append(
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": marker,
            "pid": 999,
            "tid": 999,
            "ts": step["ts"] + 1,
            "dur": 1.0,
            "args": {},
        }
    )
    data = dump(doc).replace(marker.encode(), b"bad\xff\xfename\xc3(")
    assert data.count(b"\xff\xfe") == 1
    path = tmp_path / ("bad_utf8.json.gz" if gz else "bad_utf8.json")
    path.write_bytes(gzip.compress(data) if gz else data)

    proc = run_cli(path, "--format", "json")
    assert_success(proc)
    assert "bad\ufffd\ufffdname\ufffd(" in json.dumps(json.loads(proc.stdout), ensure_ascii=False)

    trace = traceprof.load_trace(path)
    assert "bad\ufffd\ufffdname\ufffd(" in trace.events.names
    assert any("UTF-8" in w for w in trace.metadata.warnings)
    traceprof.analyze(trace).self_check()


@needs_traces
@pytest.mark.parametrize("gz", [False, True])
def test_cli_bare_event_array(tmp_path, small_doc, gz):
    """A trace saved as a bare event array analyzes like the full trace object."""
    data = dump(small_doc["traceEvents"])
    path = tmp_path / ("bare.json.gz" if gz else "bare.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    proc = run_cli(path, "--format", "json")
    assert_success(proc)
    bare = traceprof.analyze(path)
    bare.self_check()
    full = traceprof.analyze(SMALL)
    assert bare.stats == full.stats
    assert [n.qualified_name for n in bare.nodes] == [n.qualified_name for n in full.nodes]
    assert bare.selection.gpu_busy_us == pytest.approx(full.selection.gpu_busy_us)


@needs_traces
@pytest.mark.parametrize("fmt", sorted(render.REGISTRY))
def test_cli_valid_trace_each_format(fmt, tmp_path):
    if render.get(fmt).binary:  # written to a file only
        out = tmp_path / f"out.{fmt}"
        proc = run_cli(SMALL, "--format", fmt, "-o", out)
        assert proc.returncode == 0, proc.stderr
        assert all(line.startswith("traceprof: warning: ") for line in proc.stderr.splitlines())
        assert out.stat().st_size > 0
    else:
        assert_success(run_cli(SMALL, "--format", fmt))


@pytest.mark.parametrize("doc", [[], {"traceEvents": []}], ids=["bare", "object"])
def test_cli_empty_event_list_is_an_error(tmp_path, doc):
    """An empty report would look like a trace with nothing in it: say there is nothing."""
    path = tmp_path / "no_events.json"
    path.write_bytes(dump(doc))
    proc = run_cli(path)
    assert_clean_error(proc, path)
    assert proc.returncode == TraceReadError.exit_code
    assert "no events" in proc.stderr


# -- 2. the input is never modified; -o is atomic ----------------------------------------------


def _snapshot(path: Path) -> tuple[int, bytes, int]:
    st_ = path.stat()
    return st_.st_mtime_ns, path.read_bytes(), st_.st_mode


def _leftovers(directory: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


@needs_traces
@pytest.mark.parametrize("kind", ["valid", "truncated", "garbage"])
def test_input_file_is_never_modified(tmp_path, small_json, kind):
    data = {
        "valid": gzip.compress(small_json),
        "truncated": gzip.compress(small_json[: len(small_json) // 3]),
        "garbage": b"\x00garbage",
    }[kind]
    path = tmp_path / "input.json.gz"
    path.write_bytes(data)
    old = time.time() - 3600
    os.utime(path, (old, old))  # an mtime far from "now", so a rewrite would show
    before = _snapshot(path)
    for fmt in ("tree", "json"):
        proc = run_cli(path, "--format", fmt, "-o", tmp_path / f"out.{fmt}")
        assert (proc.returncode == 0) == (kind == "valid"), proc.stderr
        assert _snapshot(path) == before
    if kind == "valid":
        traceprof.analyze(path)
    else:
        with pytest.raises(TraceprofError):
            traceprof.analyze(path)
    assert _snapshot(path) == before


@needs_traces
@pytest.mark.parametrize("case", ["truncated_json", "empty", "trace_events_not_events", "missing"])
def test_output_not_created_when_analysis_fails(tmp_path, small_json, case):
    inputs = tmp_path / "in"
    outdir = tmp_path / "out"
    inputs.mkdir()
    outdir.mkdir()
    path = inputs / "trace.json"
    if case != "missing":
        path.write_bytes(BAD_FILES[case](small_json))
    out = outdir / "result.json"
    proc = run_cli(path, "-o", out)
    assert_clean_error(proc, path)
    assert not out.exists()
    assert _leftovers(outdir, set()) == []
    assert _leftovers(inputs, {"trace.json"}) == []


@needs_traces
def test_output_kept_unchanged_when_analysis_fails(tmp_path, small_json):
    """A failed run leaves an existing output file as it was."""
    out = tmp_path / "result.csv"
    out.write_text("previous result\n")
    old = time.time() - 3600
    os.utime(out, (old, old))
    before = _snapshot(out)
    bad = tmp_path / "bad.json"
    bad.write_bytes(small_json[:1000])
    assert_clean_error(run_cli(bad, "-o", out), bad)
    assert _snapshot(out) == before
    assert _leftovers(tmp_path, {"result.csv", "bad.json"}) == []


@needs_traces
def test_output_written_atomically_on_success(tmp_path):
    out = tmp_path / "result.json"
    out.write_text("old")
    proc = run_cli(SMALL, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    doc = json.loads(out.read_text(encoding="utf-8"))  # format chosen by the extension
    assert doc
    assert _leftovers(tmp_path, {"result.json"}) == []


@needs_traces
def test_output_into_missing_directory_is_a_clean_error(tmp_path):
    out = tmp_path / "no" / "such" / "dir" / "result.json"
    proc = run_cli(SMALL, "-o", out)
    assert_clean_error(proc, out)
    assert not out.parent.exists()


# -- 3. property-based: truncation, byte mutations, random structures --------------------------

# TRACEPROF_FUZZ_EXAMPLES=5000 for a longer hunt
_FUZZ = settings(
    deadline=2000,
    max_examples=int(os.environ.get("TRACEPROF_FUZZ_EXAMPLES", "150")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=False,
)

# numpy warnings (overflow, invalid casts) would reach the CLI's stderr: treat them as failures
_no_numpy_warnings = pytest.mark.filterwarnings("error::RuntimeWarning")


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    """Where examples are written (module scope: hypothesis reruns the test in one call)."""
    return tmp_path_factory.mktemp("fuzz")


def _seed_bytes() -> dict[str, bytes]:
    if not (SMALL.is_file() and CPU_ONLY.is_file()):
        return {}
    return {p.name: gzip.decompress(p.read_bytes()) for p in (SMALL, CPU_ONLY)}


SEEDS = _seed_bytes()
SEED_NAMES = sorted(SEEDS) or ["none"]


def _note(outcome: str) -> None:
    """Outcome counts for --hypothesis-show-statistics."""
    if hypothesis.currently_in_test_context():
        hypothesis.event(outcome)


def check_robust(directory: Path, data: bytes, name: str) -> traceprof.ModuleProfile | None:
    """Load and analyze ``data`` from a file: success passes self_check and renders in every
    format; failure is a TraceprofError with a one-line message. Anything else propagates."""
    path = directory / name
    path.write_bytes(data)
    try:
        trace = traceprof.load_trace(path)
        profile = traceprof.analyze(trace)
    except TraceprofError as e:
        assert e.message and "\n" not in e.message and "\r" not in e.message, repr(e.message)
        assert isinstance(e.exit_code, int) and e.exit_code != 0
        if isinstance(e, TraceReadError):
            assert str(path) in e.message
        _note(f"error: {type(e).__name__}")
        return None
    _note("analyzed")
    profile.self_check()
    for fmt, renderer in render.REGISTRY.items():
        text = render.render(profile, fmt)
        if renderer.binary:
            assert isinstance(text, bytes) and text
            continue
        assert isinstance(text, str)
        text.encode("utf-8")  # what the CLI writes must be encodable
    return profile


@needs_traces
@_no_numpy_warnings
@_FUZZ
@given(
    seed=st.sampled_from(SEED_NAMES),
    frac=st.floats(0, 1),
    mode=st.sampled_from(["plain", "gzip_of_cut", "cut_of_gzip"]),
)
def test_fuzz_truncated(fuzz_dir, seed, frac, mode):
    data = SEEDS[seed]
    if mode == "cut_of_gzip":
        gz = gzip.compress(data)
        check_robust(fuzz_dir, gz[: int(len(gz) * frac)], "fuzz.json.gz")
    else:
        cut = data[: int(len(data) * frac)]
        check_robust(
            fuzz_dir,
            gzip.compress(cut) if mode == "gzip_of_cut" else cut,
            "fuzz.json.gz" if mode == "gzip_of_cut" else "fuzz.json",
        )


# bytes that matter to JSON and to the trace's meaning
_INTERESTING = b'{}[]",:0123456789-.eE \\\n\x00\xff\xc3tfnXBEsMi#'


@st.composite
def mutations(draw):
    """A real trace with a few bytes flipped, inserted or deleted."""
    data = bytearray(SEEDS[draw(st.sampled_from(SEED_NAMES))])
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "replace", "duplicate", "digit"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "digit":  # keeps the JSON valid more often: changes values, not the syntax
            digits = [i for i in range(pos, min(pos + 2000, len(data))) if 48 <= data[i] <= 57]
            if digits:
                data[digits[0]] = draw(st.sampled_from(b"0123456789"))
        elif op == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            data[pos:pos] = bytes([draw(st.sampled_from(_INTERESTING))])
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 16))]
        elif op == "replace":
            data[pos] = draw(st.sampled_from(_INTERESTING))
        else:  # a chunk repeated: duplicated events, keys, brackets
            n = draw(st.integers(1, 400))
            data[pos:pos] = data[pos : pos + n]
    return bytes(data), draw(st.booleans())


@needs_traces
@_no_numpy_warnings
@_FUZZ
@given(mutations())
def test_fuzz_mutated_bytes(fuzz_dir, mutated):
    data, gz = mutated
    if gz:
        check_robust(fuzz_dir, gzip.compress(data), "fuzz.json.gz")
    else:
        check_robust(fuzz_dir, data, "fuzz.json")


_big_ints = st.sampled_from(
    [2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 2**64 + 1, 10**30, -(2**63), -(2**63) - 1, -(10**30)]
)
_small_ints = st.integers(-3, 60)
_numbers = st.one_of(
    _small_ints,
    st.floats(-5, 60, allow_nan=False),
    st.integers(),
    _big_ints,
    st.floats(allow_nan=False, allow_infinity=False),
)
_scalars = st.one_of(st.none(), st.booleans(), _numbers, st.text(max_size=12))
json_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=8), children, max_size=4),
    ),
    max_leaves=12,
)

_PH = ["X", "X", "X", "B", "E", "i", "I", "s", "f", "t", "M", "C", "", "x"]
_CATS = [
    "cpu_op",
    "user_annotation",
    "python_function",
    "cuda_runtime",
    "cuda_driver",
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
    "gpu_user_annotation",
    "ac2g",
    "async",
    "fwdbwd",
    "Trace",
    "Operator",
    "Runtime",
    "Kernel",
    "Memcpy",
    "",
]
_NAMES = st.one_of(
    st.sampled_from(
        [
            "ProfilerStep#1",
            "ProfilerStep#2",
            "ProfilerStep#" + "9" * 25,
            "ProfilerStep#-1",
            "nn.Module: Linear_0",
            "nn.Module: Conv2d_1",
            "nn.Module: _",
            "nn.Module: X_" + "1" * 30,
            "[traceprof:1]Linear: model.fc",
            "[traceprof:1]Model: ",
            "[traceprof:9]X: a.b",
            "[traceprof:" + "9" * 30 + "]X: a",
            "[traceprof:1]:",
            "[pl][module]torch.nn.Linear: fc",
            "[pl][module]: x",
            "autograd::engine::evaluate_function: MmBackward0",
            "MmBackward0",
            "AddmmBackward",
            "aten::mm",
            "cudaLaunchKernel",
            "hipLaunchKernel",
            "cudaMemcpyAsync",
            "thread_name",
            "process_name",
            "process_labels",
            "Memcpy HtoD",
            "void kernel<>()",
        ]
    ),
    st.text(max_size=16),
)
_ARG_KEYS = [
    "correlation",
    "External id",
    "external id",
    "Sequence number",
    "Fwd thread id",
    "Python id",
    "Python parent id",
    "stream",
    "device",
    "Input Dims",
    "Input type",
    "Concrete Inputs",
    "name",
    "labels",
    "sort_index",
]


def _maybe(strategy):
    return st.one_of(strategy, json_values)


_args = st.one_of(
    st.fixed_dictionaries({}, optional={k: _maybe(_small_ints) for k in _ARG_KEYS}),
    json_values,
)
_event = st.fixed_dictionaries(
    {},
    optional={
        "ph": _maybe(st.sampled_from(_PH)),
        "cat": _maybe(st.sampled_from(_CATS)),
        "name": _maybe(_NAMES),
        "ts": _maybe(st.one_of(_small_ints, st.floats(0, 60, allow_nan=False))),
        "dur": _maybe(st.one_of(_small_ints, st.floats(0, 20, allow_nan=False))),
        "pid": _maybe(st.sampled_from([0, 1, "1", 2, "GPU 0"])),
        "tid": _maybe(st.sampled_from([0, 1, "1", 7, "stream 7"])),
        "id": _maybe(_small_ints),
        "bp": st.sampled_from(["e", "s"]),
        "args": _args,
    },
)
_events = st.lists(st.one_of(_event, _event, _event, json_values), max_size=40)
_top_extra = st.fixed_dictionaries(
    {},
    optional={
        "schemaVersion": json_values,
        "deviceProperties": st.one_of(
            json_values,
            st.lists(
                st.dictionaries(
                    st.sampled_from(
                        ["id", "name", "totalGlobalMem", "numSms", "computeMajor", "computeMinor"]
                    ),
                    json_values,
                ),
                max_size=3,
            ),
        ),
        "distributedInfo": st.one_of(
            json_values, st.dictionaries(st.sampled_from(["rank", "world_size", "backend"]), json_values)
        ),
        "baseTimeNanoseconds": json_values,
        "record_shapes": json_values,
        "with_stack": json_values,
        "traceprof": st.one_of(
            json_values,
            st.fixed_dictionaries(
                {
                    "format": st.just("traceprof.modules"),
                    "modules": st.one_of(
                        json_values,
                        st.lists(
                            st.fixed_dictionaries(
                                {"name": json_values, "class": json_values},
                                optional={"params": json_values, "extra_repr": json_values},
                            ),
                            max_size=3,
                        ),
                    ),
                },
                optional={"version": json_values, "rank": json_values, "world_size": json_values},
            ),
        ),
    },
)


@st.composite
def documents(draw):
    shape = draw(st.sampled_from(["object", "object", "bare", "any"]))
    if shape == "any":
        return draw(json_values)
    events = draw(_events)
    if shape == "bare":
        return events
    doc = draw(_top_extra)
    doc["traceEvents"] = events
    return doc


@_no_numpy_warnings
@_FUZZ
@given(documents(), st.booleans())
def test_fuzz_random_structures(fuzz_dir, doc, gz):
    data = json.dumps(doc).encode("utf-8")
    if gz:
        check_robust(fuzz_dir, gzip.compress(data), "fuzz.json.gz")
    else:
        check_robust(fuzz_dir, data, "fuzz.json")


# a hand-written trace that exercises every stage (steps, modules, launches, backward links), so
# that value fuzzing on it reaches deep into the analysis
def _linked_trace() -> list[dict]:
    evs = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#3",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 100,
            "args": {},
        },
        {
            "ph": "X",
            "cat": "python_function",
            "name": "nn.Module: Linear_0",
            "pid": 1,
            "tid": 1,
            "ts": 1,
            "dur": 40,
            "args": {"Python id": 5, "Python parent id": 1},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": 2,
            "dur": 10,
            "args": {
                "Sequence number": 7,
                "Fwd thread id": 0,
                "External id": 11,
                "Input Dims": [[2, 3], [3, 4]],
            },
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 3,
            "dur": 2,
            "args": {"correlation": 21, "External id": 11},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm",
            "pid": 0,
            "tid": 7,
            "ts": 6,
            "dur": 5,
            "args": {"correlation": 21, "External id": 11, "stream": 7, "device": 0},
        },
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 21, "pid": 1, "tid": 1, "ts": 3},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 21, "pid": 0, "tid": 7, "ts": 6, "bp": "e"},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "autograd::engine::evaluate_function: MmBackward0",
            "pid": 1,
            "tid": 2,
            "ts": 50,
            "dur": 30,
            "args": {},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "MmBackward0",
            "pid": 1,
            "tid": 2,
            "ts": 51,
            "dur": 20,
            "args": {"Sequence number": 7, "Fwd thread id": 1},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 2,
            "ts": 52,
            "dur": 2,
            "args": {"correlation": 22},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm_bwd",
            "pid": 0,
            "tid": 7,
            "ts": 55,
            "dur": 8,
            "args": {"correlation": 22, "stream": 7},
        },
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
        {"ph": "M", "name": "process_labels", "pid": 0, "args": {"labels": "GPU 0"}},
    ]
    return evs


def test_linked_trace_is_analyzed(tmp_path):
    p = check_robust(tmp_path, dump({"traceEvents": _linked_trace()}), "linked.json")
    assert p is not None
    assert p.selection.numbers == (3,)
    assert p.stats.kernels == 2 and p.stats.backward_nodes_linked == 1


_DELETE = "<delete>"
_field_edits = st.lists(
    st.tuples(
        st.integers(0, len(_linked_trace()) - 1),  # which event
        st.sampled_from(
            ["ph", "cat", "name", "ts", "dur", "pid", "tid", "id", "args"] + [f"args.{k}" for k in _ARG_KEYS]
        ),  # which field
        st.one_of(
            json_values,
            _big_ints,
            _small_ints,
            _NAMES,
            st.sampled_from(_PH),
            st.sampled_from(_CATS),
            st.just(_DELETE),
        ),  # its new value
    ),
    min_size=1,
    max_size=5,
)


@_no_numpy_warnings
@_FUZZ
@given(_field_edits)
def test_fuzz_field_values_of_linked_trace(fuzz_dir, edits):
    """A few fields of a fully linked trace set to random values or deleted."""
    evs = _linked_trace()
    for i, key, value in edits:
        ev = evs[i]
        if key.startswith("args."):
            if not isinstance(ev.get("args"), dict):
                ev["args"] = {}
            ev, key = ev["args"], key[5:]
        if value == _DELETE:
            ev.pop(key, None)
        else:
            ev[key] = value
    check_robust(fuzz_dir, dump({"traceEvents": evs}), "linked_fuzz.json")


# -- 4. a 50 MB event name ---------------------------------------------------------------------


def _named_trace_work(tmp_path, name: str) -> tuple[int, int, int]:
    """Load and analyze the linked trace with ``name`` on a CPU op and an annotation, in this
    process (no cache, one decoder): the Python function calls made (builtins included), the
    peak of the memory Python allocated, and the JSON's size."""
    import sys
    import tracemalloc

    events = _linked_trace()
    events[2]["name"] = name  # a CPU op with a launch under it
    events.append(
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": name,
            "pid": 1,
            "tid": 3,
            "ts": 10,
            "dur": 5,
            "args": {},
        }
    )
    path = tmp_path / f"name_{len(name)}.json"
    path.write_bytes(dump({"traceEvents": events}))
    del events
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event in ("call", "c_call")

    tracemalloc.start()
    sys.setprofile(count)
    try:
        trace = traceprof.load_trace(path, cache=False, jobs=1)
        profile = traceprof.analyze(trace, cache=False)
    finally:
        sys.setprofile(None)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    profile.self_check()
    assert name in trace.events.names and profile.stats.kernels == 2
    return calls, peak, path.stat().st_size


def test_huge_event_name(tmp_path):
    """A 50 MB name: analyzed with the work of a short one, bounded by counts (no wall-clock
    bound: tests/test_no_duration_asserts.py). No Python work per character (the function
    calls stay those of a 10-character name, but for the reader's blocks of a 100 MB file) and
    no copy per use (Python's peak allocation stays within 3 times the JSON)."""
    _named_trace_work(tmp_path, "warm-up")  # lazy imports, once
    short_calls, _, _ = _named_trace_work(tmp_path, "m" * 10)
    calls, peak, size = _named_trace_work(tmp_path, "m" * 50_000_000)
    assert calls < 2 * short_calls, (calls, short_calls)
    assert peak < 3 * size, (peak, size)

"""Streaming, parallel ingest (traceprof.read: chunks, runs, parallel, load): a trace decoded run by run,
by one worker or several, gives the same tables as a whole-document decode, or the same one-line
error; the splitter holds on hostile text (quotes, brackets and backslashes in names, invalid
UTF-8, events cut exactly at run edges, one giant event, a trailing comma, a truncated file)."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from traceprof import TraceprofError  # noqa: E402
from traceprof.read import chunks, load, parallel, source  # noqa: E402
from traceprof.read.build import load_trace  # noqa: E402

from .conftest import SHARED_TRACES  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ALL_TRACES = sorted(SHARED_TRACES.glob("*/*.json.gz")) + sorted((REPO / "sample_traces").glob("*.json.gz"))
WHOLE = 1 << 40  # a run size no test file reaches: the whole-document decoder


def assert_same_trace(a, b) -> None:
    """The two Traces are equal field by field (NaN equal to NaN, dtypes equal)."""
    for part in ("events", "memory"):
        x, y = getattr(a, part), getattr(b, part)
        assert (x is None) == (y is None), part
        if x is None:
            continue
        for name in x.__struct_fields__:
            u, v = getattr(x, name), getattr(y, name)
            if isinstance(u, np.ndarray):
                assert u.dtype == v.dtype, f"{part}.{name} dtype"
                assert np.array_equal(u, v, equal_nan=u.dtype.kind == "f"), f"{part}.{name}"
            else:
                assert u == v, f"{part}.{name}"
    for f in ("python_ids", "python_parent_ids"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert a.metadata == b.metadata


def outcome(path, **kw):
    """The Trace of ``path``, or the one-line message of the error it gives."""
    try:
        return load_trace(path, **kw)
    except TraceprofError as e:
        return f"{type(e).__name__}: {e.message}"


def assert_same_outcome(path, **kw) -> None:
    whole = outcome(path, chunk_bytes=WHOLE, jobs=1)
    streamed = outcome(path, **kw)
    if isinstance(whole, str) or isinstance(streamed, str):
        assert whole == streamed
    else:
        assert_same_trace(whole, streamed)


#: how the runs are cut: likely boundaries checked by decoding (then the scanner when a cut was
#: wrong), the likely boundaries alone (then the whole-document decoder), the scanner alone
SPLITTERS = {"default": load.SPLITTERS, "cutter": (chunks.Cutter,), "scanner": (chunks.Scanner,)}


def cut_by(name: str):
    return mock.patch.object(load, "SPLITTERS", SPLITTERS[name])


def is_streamed(path, chunk_bytes: int) -> bool:
    return isinstance(load.load_raw(path, jobs=1, chunk_bytes=chunk_bytes), load.StreamedDocument)


# -- every real trace --------------------------------------------------------------------------


def test_the_traces_are_there():
    assert len(ALL_TRACES) >= 20


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name)
def test_streamed_decode_is_the_whole_decode(path):
    whole = load_trace(path, jobs=1, chunk_bytes=WHOLE)
    # runs enough for a pool, cut anywhere
    small = max(4096, whole.metadata.size_bytes // (parallel.POOL_MIN_RUNS + 2))
    assert is_streamed(path, small)
    assert_same_trace(whole, load_trace(path, jobs=1, chunk_bytes=small))
    assert_same_trace(whole, load_trace(path, jobs=2, chunk_bytes=small))
    # fewer runs: read whole, then shared with a forked worker
    few = max(4096, whole.metadata.size_bytes // 3)
    with mock.patch.object(parallel, "decode_shared", wraps=parallel.decode_shared) as shared:
        assert_same_trace(whole, load_trace(path, jobs=2, chunk_bytes=few))
    assert shared.call_count == 1


def test_plain_json_is_read_by_the_workers_at_offsets(tmp_path):
    src = SHARED_TRACES / "module_tree/h100_bert_small_inference.json.gz"
    path = tmp_path / "t.json"
    path.write_bytes(b"\xef\xbb\xbf" + gzip.decompress(src.read_bytes()))  # with a BOM
    whole = load_trace(path, jobs=1, chunk_bytes=WHOLE)
    assert is_streamed(path, 50_000)
    assert_same_trace(whole, load_trace(path, jobs=2, chunk_bytes=50_000))
    assert_same_trace(whole, load_trace(path, jobs=1, chunk_bytes=1))


# -- hostile text ------------------------------------------------------------------------------

NASTY = [
    '"',
    "\\",
    '\\"',
    "[",
    "]",
    "{",
    "}",
    "},{",
    '"},{"ph":"X"',
    "\\\\",
    ",",
    ":",
    "é",
    "\u2028",
    "\x01",
    "nn.Module: X_1",
]


def event(i: int, name: str, rng: random.Random) -> dict:
    ev = {
        "ph": "X",
        "cat": rng.choice(["cpu_op", "kernel", "cuda_runtime", "user_annotation"]),
        "name": name,
        "pid": rng.choice([1, "1", 2]),
        "tid": rng.choice([7, "7"]),
        "ts": 1000.0 + i * 10 + rng.random(),
        "dur": rng.choice([1, 2.5, 0]),
    }
    args = {}
    if rng.random() < 0.5:
        args["correlation"] = i
        args["External id"] = rng.randrange(100)
    if rng.random() < 0.3:
        args["Input Dims"] = [[rng.randrange(9), 3], []]
        args["Input type"] = ["float", ""]
        args["Concrete Inputs"] = ["", "[1, 1]"]
    if rng.random() < 0.2:
        args["unread"] = {"deep": [{"x": name}, {"y": [1, {"z": "}"}]}]}
    if args:
        ev["args"] = args
    return ev


def document(events: list, rng: random.Random, bare: bool, indent) -> bytes:
    if bare:
        doc = events
    else:
        doc = {
            "schemaVersion": 1,
            "deviceProperties": [{"name": "x[]{}", "id": 0}],
            "before": {"traceEvents": ["not", "these"], "s": '"traceEvents": ['},
            "traceEvents": events,
            "traceName": 't"]}',
            "baseTimeNanoseconds": 12,
        }
        if rng.random() < 0.5:  # Kineto writes some keys after the events
            doc["distributedInfo"] = {"rank": 3, "world_size": 8, "backend": "nccl"}
    return json.dumps(doc, ensure_ascii=rng.random() < 0.5, indent=indent).encode()


names = st.lists(st.sampled_from(NASTY), max_size=4).map("".join) | st.text(max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(names, min_size=1, max_size=12),
    seed=st.integers(0, 2**16),
    bare=st.booleans(),
    indent=st.sampled_from([None, 0, 2]),
    chunk=st.integers(1, 400),
    jobs=st.sampled_from([1, 1, 2]),
    splitter=st.sampled_from(list(SPLITTERS)),
)
def test_hostile_names_split_like_the_whole_document(
    tmp_path_factory, names, seed, bare, indent, chunk, jobs, splitter
):
    rng = random.Random(seed)
    events = [event(i, n, rng) for i, n in enumerate(names)]
    path = tmp_path_factory.mktemp("h") / "t.json"
    path.write_bytes(document(events, rng, bare, indent))
    assert is_streamed(path, chunk) == (path.stat().st_size > chunk)
    with cut_by(splitter):
        assert_same_outcome(path, chunk_bytes=chunk, jobs=jobs)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    cut=st.integers(0, 10**6),
    chunk=st.integers(1, 300),
    mutate=st.sampled_from(["truncate", "invalid_utf8", "byte", "trailing_comma", "none"]),
    splitter=st.sampled_from(list(SPLITTERS)),
    jobs=st.sampled_from([1, 1, 2]),
)
def test_damaged_text_gives_the_whole_documents_answer(
    tmp_path_factory, seed, cut, chunk, mutate, splitter, jobs
):
    rng = random.Random(seed)
    events = [event(i, rng.choice(NASTY) + "op", rng) for i in range(8)]
    data = document(events, rng, bare=rng.random() < 0.3, indent=rng.choice([None, 1]))
    at = cut % len(data)
    if mutate == "truncate":
        data = data[:at]
    elif mutate == "invalid_utf8":
        k = data.index(b'"op"') if b'"op"' in data else data.index(b'op"')
        data = data[: k + 1] + b"\xff\xfe" + data[k + 1 :]
    elif mutate == "byte":
        data = data[:at] + bytes([rng.choice(b'{}[]",:\\ x')]) + data[at + 1 :]
    elif mutate == "trailing_comma":
        k = (
            data.rindex(b"}", 0, data.rindex(b"]") + 1)
            if not data.rstrip().endswith(b"]")
            else data.rstrip().rindex(b"}")
        )
        data = data[: k + 1] + b"," + data[k + 1 :]
    path = tmp_path_factory.mktemp("d") / "t.json"
    path.write_bytes(data)
    with cut_by(splitter):
        assert_same_outcome(path, chunk_bytes=chunk, jobs=jobs)


def _events_text(n: int) -> tuple[bytes, list[int]]:
    parts = [json.dumps(event(i, f"op{i}", random.Random(i))).encode() for i in range(n)]
    return b'{"traceEvents":[' + b",".join(parts) + b"]}", [len(p) for p in parts]


def test_runs_cut_exactly_at_every_event_edge(tmp_path):
    data, sizes = _events_text(6)
    path = tmp_path / "t.json"
    path.write_bytes(data)
    for chunk in sorted(set(sizes) | {s + 1 for s in sizes} | {1, 2}):
        assert is_streamed(path, chunk)
        assert_same_outcome(path, chunk_bytes=chunk, jobs=1)
    # and blocks of the gzip reader that end on every byte
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(data))
    for block in (1, 2, 3, 7, 64):
        seen = list(chunks.scan([data[i : i + block] for i in range(0, len(data), block)], 1))
        runs, outline = seen[:-1], seen[-1]
        assert outline.top == b'{"traceEvents":[]}'
        assert len(runs) == len(sizes)
        assert b"".join(data[r.start : r.end] for r in runs) == data[16:-2]
    assert_same_outcome(gz, chunk_bytes=1, jobs=2)


def test_one_giant_event(tmp_path):
    big = {
        "ph": "X",
        "cat": "cpu_op",
        "name": "x" * 300_000 + '"]}{[',
        "ts": 1,
        "dur": 2,
        "pid": 1,
        "tid": 1,
        "args": {"unread": ["[{"] * 20_000},
    }
    small = {"ph": "X", "cat": "cpu_op", "name": "y", "ts": 2, "dur": 1, "pid": 1, "tid": 1}
    path = tmp_path / "t.json"
    path.write_bytes(json.dumps({"traceEvents": [small, big, small]}).encode())
    assert is_streamed(path, 1000)
    for splitter in SPLITTERS:
        with cut_by(splitter):
            assert_same_outcome(path, chunk_bytes=1000, jobs=2)


@pytest.mark.parametrize(
    "text, says",
    [
        (b'{"traceEvents":[{"ph":"X","ts":1,"dur":1,"name":"a"},]}', "not valid JSON"),
        (b'{"traceEvents":[{"ph":"X","ts":1,"dur":1,"name":"a"},{"ph":"X","ts":2', "truncated"),
        (b'[{"ph":"X","ts":1,"dur":1,"name":"a"}{"ph":"X","ts":2,"dur":1,"name":"b"}]', "not valid JSON"),
        (b'{"traceEvents":[{"ph":"X","ts":1,"dur":1,"name":"a"}],"traceEvents":[]}', None),
        (b'{"traceEvents":[{"ph":"X","ts":"x","dur":1,"name":"a"},{"ph":"X","ts":1,"name":"b"}]}', None),
        (b'{"traceEvents":[{"ph":"B","ts":1,"name":"a"},{"ph":"E","ts":3,"name":"a"}]}', None),
    ],
)
def test_what_runs_cannot_say_is_said_by_the_whole_document(tmp_path, text, says):
    path = tmp_path / "t.json"
    path.write_bytes(text + b" " * 64)
    whole = outcome(path, chunk_bytes=WHOLE, jobs=1)
    if says:
        assert isinstance(whole, str) and says in whole
    for chunk in (1, 10, 40):
        for splitter in SPLITTERS:
            with cut_by(splitter):
                assert_same_outcome(path, chunk_bytes=chunk, jobs=1)


# -- runs cut at likely boundaries -------------------------------------------------------------


class Recuts:
    """Counts the loads whose likely cuts were found wrong (parallel.Recut)."""

    def __init__(self) -> None:
        self.count = 0
        self.stream_document = parallel.stream_document

    def __call__(self, *args, **kwargs):
        try:
            return self.stream_document(*args, **kwargs)
        except parallel.Recut:
            self.count += 1
            raise


def recuts():
    return mock.patch.object(parallel, "stream_document", Recuts())


def cutter_runs(data: bytes, chunk: int, block: int) -> tuple[list, chunks.Outline]:
    cutter = chunks.Cutter(chunk)
    runs = []
    for i in range(0, len(data), block):
        runs += cutter.feed(data[i : i + block])
    runs += cutter.finish()
    return runs, cutter.outline


@pytest.mark.parametrize("block", [1, 3, 17, 1 << 20])
def test_the_cutter_cuts_at_event_boundaries(block):
    """Runs one after the other over the whole array, each ending after an event (a boundary
    that straddles two blocks is passed over: the run ends at the next one); in one block,
    the scanner's runs."""
    data, _sizes = _events_text(12)
    runs, outline = cutter_runs(data, 150, block)
    scanned = list(chunks.scan([data], 150))
    assert outline == scanned[-1]
    event_ends = {r.end for r in list(chunks.scan([data], 1))[:-1]}
    assert runs[0].start == 16 and runs[-1].end == len(data) - 2
    assert all(a.end == b.start for a, b in itertools.pairwise(runs))
    assert {r.end for r in runs} <= event_ends
    assert [r.first for r in runs] == [True] + [False] * (len(runs) - 1)
    if block > len(data):
        assert runs == scanned[:-1]
        assert len(runs) > 3


def test_the_cutter_leaves_the_scanner_only_the_last_event_and_what_follows(tmp_path):
    """From the last cut on, the array is cut once more at its last likely boundary, not at one
    in the text after it (here, one deviceProperties object per GPU after the events, as some
    Kineto versions write them): no run is cut again, and the scanner reads one event."""
    events = [event(i, f"op{i}", random.Random(i)) for i in range(50)]
    for e in events:
        e.pop("args", None)  # no nested objects: every "},{" between two events
    devices = [{"id": i, "name": "NVIDIA H100 80GB HBM3", "numSms": 132} for i in range(8)]
    text = json.dumps(
        {"traceEvents": events, "deviceProperties": devices, "traceName": "t"}, indent=2
    ).encode()
    runs, outline = cutter_runs(text, len(text) // 3, 1 << 20)
    assert json.loads(text[runs[-1].start : runs[-1].end].strip(b" \n,")) == events[-1]
    assert outline == list(chunks.scan([text], len(text)))[-1]
    path = tmp_path / "t.json"
    path.write_bytes(text)
    with recuts() as counted:
        assert_same_outcome(path, chunk_bytes=len(text) // 3, jobs=1)
    assert counted.count == 0


def test_a_cut_inside_a_string_is_found_out_and_recut(tmp_path):
    """A name holding a likely boundary, right where the cutter looks: the run before it does
    not decode, the scanner cuts the text again, and the Trace is the same."""
    events = [event(i, "op", random.Random(i)) for i in range(40)]
    events[20]["name"] = 'x"}, {"ph":"X","name":"y' * 50
    text = json.dumps({"traceEvents": events}).encode()
    path = tmp_path / "t.json"
    path.write_bytes(text)
    chunk = text.index(b'x\\"}, {') - 16  # the first likely boundary after it is in the name
    with recuts() as counted:
        assert_same_outcome(path, chunk_bytes=chunk, jobs=1)
    assert counted.count == 1
    with cut_by("cutter"):
        assert_same_outcome(path, chunk_bytes=chunk, jobs=2)


def test_plain_traces_are_not_recut(tmp_path):
    src = SHARED_TRACES / "module_tree/h100_bert_small_inference.json.gz"
    path = tmp_path / "t.json"
    path.write_bytes(gzip.decompress(src.read_bytes()))
    with recuts() as counted:
        for chunk in (4096, 50_000):
            assert is_streamed(path, chunk)
    assert counted.count == 0


def test_no_likely_boundary_at_all(tmp_path):
    """Events written without a comma and whitespace pattern the cutter knows (one per line,
    separated by a comma at the end of a line is one; "}  ,{" too), and none at all: the last
    run from the array's start is scanned."""
    events = [event(i, "op", random.Random(i)) for i in range(30)]
    for sep in (b",", b"\n,\n", b" , "):
        path = tmp_path / "t.json"
        path.write_bytes(b'{"traceEvents":[' + sep.join(json.dumps(e).encode() for e in events) + b"]}")
        assert_same_outcome(path, chunk_bytes=200, jobs=1)
    path.write_bytes(json.dumps({"traceEvents": [events[0]], "pad": "x" * 5000}).encode())
    assert_same_outcome(path, chunk_bytes=200, jobs=2)


def test_a_pool_for_traces_of_many_runs_and_shared_runs_for_the_others():
    runs = parallel.POOL_MIN_RUNS
    assert parallel.shared_run_bytes(runs * 1000, 4, 1000) is None  # a pool, as the text comes
    assert parallel.shared_run_bytes(None, 4, 1000) is None  # a gzip trailer that cannot be right
    assert parallel.shared_run_bytes((runs - 1) * 1000, 1, 1000) is None  # one process
    per_process = parallel.SHARED_RUNS_PER_PROCESS
    size = 40 << 20
    assert parallel.shared_run_bytes(size, 2, 8 << 20) == -(-size // (2 * per_process))
    assert parallel.shared_run_bytes(2 << 20, 2, 1 << 20) == 1 << 20  # runs of at least 1 MiB
    assert parallel.shared_run_bytes(3000, 2, 1000) == 1000  # ... or of chunk_bytes


def shared_text(tmp_path, n: int = 60) -> Path:
    events = [event(i, f"op{i}", random.Random(i)) for i in range(n)]
    path = tmp_path / "t.json"
    path.write_bytes(json.dumps({"traceEvents": events, "traceName": "t"}).encode())
    return path


def test_a_shared_trace_is_decoded_by_this_process_and_a_forked_worker(tmp_path):
    """Each run is decoded once, by whichever process takes it; this one waits, in its first
    run, until the worker has taken one, so both take part whatever the machine's speed."""
    path = shared_text(tmp_path)
    size = path.stat().st_size
    chunk = size // (parallel.POOL_MIN_RUNS - 1)
    assert parallel.shared_run_bytes(size, 2, chunk) == chunk
    log = tmp_path / "runs.log"
    main = os.getpid()
    decode_run = parallel.decode_run

    def logged(text, first):
        if os.getpid() == main and first:
            # until a worker has taken a run (the takers asserted below say whether one did)
            deadline = time.monotonic() + 60
            while f"{main}" == (log.read_text().split() or [f"{main}"])[0] and time.monotonic() < deadline:
                time.sleep(0.01)
        with log.open("a") as f:
            f.write(f"{os.getpid()}\n")
        return decode_run(text, first)

    log.write_text("")
    with (
        mock.patch.object(parallel, "decode_run", logged),
        cut_by("scanner"),
        mock.patch.object(parallel, "decode_shared", wraps=parallel.decode_shared) as shared,
    ):
        assert_same_outcome(path, chunk_bytes=chunk, jobs=2)
    assert shared.call_count == 1
    takers = log.read_text().split()
    assert len(takers) == len(shared.call_args.args[0]) >= 3  # every run, once
    assert set(takers) > {str(main)}


def test_a_worker_that_dies_sends_the_trace_to_the_whole_document_decoder(tmp_path):
    path = shared_text(tmp_path)
    chunk = path.stat().st_size // 4
    main = os.getpid()
    died = tmp_path / "died"
    decode_run = parallel.decode_run

    def dies_in_a_worker(text, first):
        if os.getpid() != main:
            died.touch()
            os._exit(3)
        deadline = time.monotonic() + 60
        while first and not died.exists() and time.monotonic() < deadline:  # until a worker took a run
            time.sleep(0.01)
        return decode_run(text, first)

    with mock.patch.object(parallel, "decode_run", dies_in_a_worker):
        with mock.patch.object(parallel, "decode_shared", wraps=parallel.decode_shared) as shared:
            assert_same_outcome(path, chunk_bytes=chunk, jobs=2)
        assert shared.call_count == 2  # the cutter's runs, then the scanner's
        died.unlink()
        text = parallel._Blocks()
        text.append(b'{"ph":"X"},{"ph":"X"}')
        with pytest.raises(parallel.Fallback, match="worker ended"):
            parallel.decode_shared([chunks.Run(0, 10, True), chunks.Run(10, 21, False)], text, 2)


def test_a_run_that_fails_in_a_worker_fails_the_load_the_same_way(tmp_path):
    """A cut inside a string found out in the worker: the text is cut again, or the whole
    document decoded, with the same result."""
    events = [event(i, "op", random.Random(i)) for i in range(40)]
    events[30]["name"] = 'x"}, {"ph":"X","name":"y' * 50
    path = tmp_path / "t.json"
    path.write_bytes(json.dumps({"traceEvents": events}).encode())
    with cut_by("cutter"):
        assert_same_outcome(path, chunk_bytes=path.stat().st_size // 5, jobs=2)
    with recuts() as counted:
        assert_same_outcome(path, chunk_bytes=path.stat().st_size // 5, jobs=2)
    assert counted.count == 1


def test_more_text_than_a_gzip_trailer_claims_goes_to_a_pool(tmp_path):
    """A trailer gives the size modulo 4 GiB: a trace shared because of it, whose text goes on
    past twice the size of a pool's trace, is sent to a pool from there on."""
    path = shared_text(tmp_path, 200)
    data = path.read_bytes()
    whole = load_trace(path, jobs=1, chunk_bytes=WHOLE)
    chunk = len(data) // (4 * parallel.POOL_MIN_RUNS)
    blocks = (data[i : i + 4096] for i in range(0, len(data), 4096))
    budget = parallel.MemoryBudget(path, None, 1.0)
    with mock.patch.object(parallel, "decode_shared") as shared:
        outline, columns = parallel.stream_document(
            path, blocks, None, 2, chunk, budget, chunks.Scanner, json_bytes=chunk * 3
        )
    assert shared.call_count == 0
    assert len(columns) == len(whole.events) and outline.size_bytes == len(data)


def test_zlib_ng_inflates_like_zlib(tmp_path):
    """gzip data is inflated by zlib-ng where it is installed, else by zlib: the same text, the
    same errors, whichever it is (every member of a multi-member file, a truncated file, a
    damaged checksum)."""
    import zlib

    src = SHARED_TRACES / "module_tree/h100_bert_small_inference.json.gz"
    text = gzip.decompress(src.read_bytes())
    gz = gzip.compress(text)
    half = len(text) // 2
    files = {
        "one member": gz,
        "two members": gzip.compress(text[:half]) + b"\0\0" + gzip.compress(text[half:]),
        "truncated": gz[: len(gz) // 2],
        "bad checksum": gz[:-8] + bytes([gz[-8] ^ 0xFF]) + gz[-7:],
    }
    assert source.zlib.__name__ == "zlib_ng.zlib_ng"  # a dependency: installed here
    for name, data in files.items():
        path = tmp_path / f"{name}.json.gz"
        path.write_bytes(data)
        for chunk in (WHOLE, 50_000):
            with mock.patch.object(source, "zlib", zlib):
                expected = outcome(path, chunk_bytes=chunk, jobs=1)
            got = outcome(path, chunk_bytes=chunk, jobs=1)
            if isinstance(expected, str) or isinstance(got, str):
                assert got == expected, name
            else:
                assert_same_trace(expected, got)
        if name.endswith(("member", "members")):
            assert not isinstance(got, str)
        else:
            assert isinstance(got, str) and "gzip" in got, name


_HELD_SHARED_DECODE = r"""
import os, sys, time
from traceprof.read import chunks, parallel
reading = os.getpid()
trace, pid_file = sys.argv[1:]

def held(text, first):
    if os.getpid() != reading:
        with open(pid_file, "w") as f:
            f.write(str(os.getpid()))
        print("a worker is decoding", flush=True)
    time.sleep(120)

parallel.decode_run = held
chunks.DEFAULT_CHUNK_BYTES = 20_000
sys.argv = ["traceprof", "analyze", trace, "--jobs", "2"]
from traceprof.cli import run
run()
"""


@pytest.mark.parametrize(
    "signum, code, message, group",
    [
        (signal.SIGINT, 130, "interrupted", True),  # Ctrl-C: the whole process group
        (signal.SIGTERM, 143, "terminated", False),
    ],
    ids=["ctrl-c", "sigterm"],
)
def test_a_signal_while_a_shared_trace_is_decoded(tmp_path, signum, code, message, group):
    """One error line and the exit status of the signal, no traceback from a worker, and no
    worker left running."""
    path = shared_text(tmp_path, 300)
    assert parallel.shared_run_bytes(path.stat().st_size, 2, 20_000) is not None
    worker_pid = tmp_path / "worker.pid"
    proc = subprocess.Popen(
        [sys.executable, "-c", _HELD_SHARED_DECODE, str(path), str(worker_pid)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout.readline() == "a worker is decoding\n", proc.stderr.read()
        if group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == code
    assert stderr.splitlines() == [f"traceprof: error: {message}"]
    with pytest.raises(ProcessLookupError):
        os.kill(int(worker_pid.read_text()), 0)


def test_threads_that_load_shared_traces_at_once(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    paths = []
    for i in range(3):
        (tmp_path / str(i)).mkdir()
        paths.append(shared_text(tmp_path / str(i), 80 + 40 * i))
    chunk = min(p.stat().st_size for p in paths) // 4
    wholes = [load_trace(p, jobs=1, chunk_bytes=WHOLE) for p in paths]
    with ThreadPoolExecutor(3) as pool:
        loaded = list(pool.map(lambda p: load_trace(p, jobs=2, chunk_bytes=chunk), paths * 2))
    for whole, got in zip(wholes * 2, loaded):
        assert_same_trace(whole, got)


def _load_in_a_daemon(path, chunk, queue):
    trace = load_trace(path, jobs=2, chunk_bytes=chunk)
    queue.put(len(trace.events))


@pytest.mark.parametrize("runs", [3, 2 * parallel.POOL_MIN_RUNS])  # shared, and a pool's
def test_a_daemonic_process_decodes_alone(tmp_path, runs):
    """A multiprocessing pool's worker may not start processes: asked for two, it decodes the
    runs itself."""
    import multiprocessing

    path = shared_text(tmp_path, 120)
    chunk = path.stat().st_size // runs
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    process = context.Process(target=_load_in_a_daemon, args=(path, chunk, queue), daemon=True)
    process.start()
    process.join(60)
    assert process.exitcode == 0
    assert queue.get(timeout=10) == len(load_trace(path, jobs=1, chunk_bytes=WHOLE).events)


def test_sharing_a_trace_does_not_import_multiprocessing(tmp_path):
    """Forking and two pipes are all a shared trace needs; multiprocessing takes 12 ms to
    import, a tenth of the start-up."""
    path = shared_text(tmp_path, 120)
    code = (
        "import sys\nfrom traceprof.read import parallel\nfrom traceprof.read.build import load_trace\n"
        "from unittest import mock\n"
        "with mock.patch.object(parallel, 'decode_shared', wraps=parallel.decode_shared) as s:\n"
        f"    load_trace(sys.argv[1], jobs=2, chunk_bytes={path.stat().st_size // 3})\n"
        "assert s.call_count >= 1\n"
        "print('multiprocessing' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False"]


def test_when_no_worker_can_be_forked_the_reading_process_decodes_alone(tmp_path):
    path = shared_text(tmp_path, 120)

    def no_fork():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    with mock.patch.object(os, "fork", no_fork):
        assert_same_outcome(path, chunk_bytes=path.stat().st_size // 3, jobs=2)


def test_flow_ids_keep_integers_and_hash_strings_alike(tmp_path):
    events = [
        {"ph": "s", "cat": "ac2g", "name": "f", "pid": 1, "tid": 1, "ts": 1.0, "id": fid}
        for fid in (7, "a7", 2**40, "a7", 7)
    ]
    path = tmp_path / "flows.json"
    path.write_text(json.dumps({"traceEvents": events}))
    ids = load_trace(path, cache=False).events.flow_id.tolist()
    assert ids[0] == ids[4] == 7 and ids[2] == 2**40  # integer ids as written
    assert ids[1] == ids[3] and ids[1] not in (7, 2**40, -1)  # a string id: one number for it

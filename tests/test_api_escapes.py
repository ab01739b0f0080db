"""Names from a trace reach a Python user's terminal escaped too (issue 33, item 15): the reprs
of a profile, a node, a job and a diff (a hostile file name, module or class name), and the
message of every TraceprofError, ModuleLookupError's among them (``str(e)`` and ``e.message``,
what a traceback or a notebook shows). The data keeps the names raw."""

from __future__ import annotations

import pickle

import pytest

import traceprof
from traceprof.errors import ModuleLookupError, TraceprofError, TraceReadError

from .test_injection import CLASS, RAW_CONTROL, hostile_trace

EVIL = "run\x1b]0;pwned\x07\x1b[2J\x9b"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    job = d / f"job{EVIL}"
    job.mkdir()
    return {
        "trace": hostile_trace().write(d / f"{EVIL}.json"),
        "other": hostile_trace(kernel_us=20.0).write(d / "other.json"),
        "ranks": [hostile_trace(rank=r).write(job / f"{EVIL}_rank{r}.json") for r in (0, 1)],
    }


def test_reprs_show_control_characters_escaped(hostile):
    profile = traceprof.analyze(hostile["trace"])
    node = next(n for n in profile.nodes if n.class_name == CLASS)
    job = traceprof.analyze_job(hostile["ranks"], jobs=1)
    diff = traceprof.diff(hostile["trace"], hostile["other"], parallel=False)
    for shown in (repr(profile), repr(node), repr(job), repr(diff)):
        assert not RAW_CONTROL.search(shown), shown  # before: ESC, BEL and 0x9b raw
        assert "\\x1b" in shown
    assert profile.metadata.path == str(hostile["trace"]) and node.class_name == CLASS  # the data: raw


def test_a_lookup_error_names_hostile_modules_escaped(tmp_path):
    from .tracebuilder import TraceBuilder

    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.scope("", "Net", 10, 900)
    for i, name in enumerate((f"enc{EVIL}", f"enc{EVIL}2")):
        b.scope(name, "Linear", 20 + 100 * i, 50)
        b.op("aten::mm", 21 + 100 * i, 10)
    profile = traceprof.analyze(b.write(tmp_path / "t.json"))
    for query, kind in (("enc", "matches"), (f"enx{EVIL}", "suggestions")):
        with pytest.raises(ModuleLookupError) as raised:
            profile.find(query)
        error = raised.value
        for text in (error.message, str(error), repr(error)):
            assert not RAW_CONTROL.search(text), text  # before: ESC, BEL and 0x9b raw
        assert "\\x1b" in error.message
        assert f"enc{EVIL}" in getattr(error, kind)  # the data: the names as they are


def test_every_error_message_is_one_printable_line():
    error = TraceReadError(f"/tmp/{EVIL}.json", "no such\nfile")
    assert error.message == str(error) == "/tmp/run\\x1b]0;pwned\\x07\\x1b[2J\\x9b.json: no such file"
    copy = pickle.loads(pickle.dumps(error))  # from a worker process
    assert str(copy) == copy.message == error.message and isinstance(copy, TraceprofError)

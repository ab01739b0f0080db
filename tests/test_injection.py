"""Names from a trace are data, never commands (docs/security.md).

1. CSV (analyze, ``--ops``, diff, job): a text cell that starts like a spreadsheet formula
   (``=``, ``+``, ``-``, ``@``, tab, CR) is written with ``'`` before it; numbers, negative ones
   included, stay numbers.
2. Text for people (tree, table, ``--ops`` text, the diff's tree, the job's tree and table, the
   warnings on stderr): control characters (ESC, CR, BEL, ...) are shown escaped, never written.

The traces are built in code with hostile module, class, op, kernel and device names.
"""

from __future__ import annotations

import csv
import io
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceprof import render, units
from traceprof.cli import main
from traceprof.cli.common import emit, print_warnings
from traceprof.job.analyze import analyze_job
from traceprof.render.csv_format import neutralized

from .tracebuilder import TraceBuilder

MODULE = '=HYPERLINK("http://x","click")'
OTHER_MODULE = "@enc\tx"
CLASS = "Lin\x1b[2Jear"
OP = "-2+3\x1b[31mred\r"
KERNEL = "=1+2void k\x1b]0;title\x07()"
OTHER_KERNEL = "+cmd|' /C calc'!A0"
DEVICE = "GPU\x1b]0;pwned\x07\x1b[2J\x9b"

#: what must never reach a terminal raw: C0 controls but the newline, DEL, C1 controls
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def hostile_trace(kernel_us: float = 50.0, rank: int | None = None) -> TraceBuilder:
    b = TraceBuilder()
    b.top["deviceProperties"] = [{"id": 0, "name": DEVICE}]
    if rank is not None:
        b.top["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    for step in (1, 2):
        t = (step - 1) * 1000
        b.step(step, t, 900)
        b.scope("", "Model", t + 5, 850)
        b.scope(MODULE, CLASS, t + 10, 500)
        b.op(OP, t + 12, 100)
        b.launch(t + 13, t + 40, kernel_us, name=KERNEL)
        b.scope(OTHER_MODULE, "Linear", t + 520, 300)
        b.op("aten::mm", t + 530, 100)
        b.launch(t + 531, t + 600, 80, name=OTHER_KERNEL)
    return b


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hostile")
    job = d / "job"
    job.mkdir()
    return {
        "base": hostile_trace().write(d / "base.json"),
        "new": hostile_trace(kernel_us=20.0).write(d / "new.json"),
        "rank0": hostile_trace(rank=0).write(job / "rank0.json"),
        "rank1": hostile_trace(rank=1).write(job / "rank1.json"),
    }


def cli(*args) -> tuple[str, str]:
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, (r.output, r.exception)
    return r.stdout, r.stderr


def csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def assert_neutralized(rows: list[dict[str, str]], column: str, hostile: str) -> None:
    cells = {r[column] for r in rows}
    assert "'" + hostile in cells, sorted(cells)
    assert hostile not in cells


# -- 1. CSV ---------------------------------------------------------------------------------------


def test_neutralized_prefixes_formula_text_only():
    for text in ("=1+2", "+1", "-1", "@SUM(A1)", "\tx", "\rx"):
        assert neutralized(text) == "'" + text
    for value in ("aten::mm", "a=b", "", "(not in any module)", "[[1, 2]]", -1, -2.5, 0.0, None, True):
        assert neutralized(value) == value


def test_a_carriage_return_inside_a_cell_keeps_the_row_whole():
    from traceprof.render.csv_format import write_csv

    rows = [{"name": "a\rb", "us": -1.5}, {"name": "c\nd", "us": 2}, {"name": "plain", "us": 0}]
    text = write_csv(rows, ["name", "us"])
    assert text.endswith("plain,0\n") and "\r\n" not in text
    assert csv_rows(text) == [
        {"name": n, "us": u} for n, u in (("a\rb", "-1.5"), ("c\nd", "2"), ("plain", "0"))
    ]


def test_analyze_csv_neutralizes_names_and_keeps_numbers(traces):
    rows = csv_rows(cli("analyze", traces["base"], "-f", "csv")[0])
    assert_neutralized(rows, "qualified_name", MODULE)
    assert_neutralized(rows, "name", OTHER_MODULE)
    assert {r["parent"] for r in rows} >= {"-1"}  # a negative number stays a number
    busy = {r["qualified_name"]: float(r["forward_total_gpu_busy_us"]) for r in rows}
    assert (busy["'" + MODULE], busy["'" + OTHER_MODULE]) == (50.0, 80.0)


def test_ops_csv_neutralizes_op_and_kernel_names(traces):
    rows = csv_rows(cli("analyze", traces["base"], "--ops", "*", "-f", "csv")[0])
    assert_neutralized(rows, "name", OP)
    assert_neutralized(rows, "name", KERNEL)
    assert_neutralized(rows, "name", OTHER_KERNEL)
    assert_neutralized(rows, "qualified_name", MODULE)
    kernel = next(r for r in rows if r["name"] == "'" + KERNEL)
    assert float(kernel["gpu_busy_us"]) == 50.0 and float(kernel["share_of_node"]) == 1.0


def test_diff_csv_neutralizes_names_and_keeps_negative_deltas(traces):
    rows = csv_rows(cli("diff", traces["base"], traces["new"], "-f", "csv")[0])
    assert_neutralized(rows, "qualified_name", MODULE)
    changed = next(r for r in rows if r["qualified_name"] == "'" + MODULE and r["pass"] == "forward")
    assert float(changed["delta_us"]) == -30.0  # faster: a negative number, not text
    assert changed["delta_us"].startswith("-")


def test_job_csv_neutralizes_names(traces):
    job = analyze_job([traces["rank0"], traces["rank1"]], jobs=1)
    rows = csv_rows(render.render_job(job, "csv"))
    assert_neutralized(rows, "qualified_name", MODULE)
    assert_neutralized(rows, "module", OTHER_MODULE)
    assert {r["rank"] for r in rows} == {"0", "1"}
    forward = next(r for r in rows if r["module"] == "'" + MODULE and r["pass"] == "forward")
    assert float(forward["gpu_busy_us"]) == 50.0


def test_json_keeps_names_raw(traces):
    out = cli("analyze", traces["base"], "-f", "json")[0]
    assert MODULE.replace('"', '\\"') in out  # data formats keep the names as they are
    assert "\\u001b[2Jear" in out  # JSON's own escape of ESC


# -- 2. text for people -------------------------------------------------------------------------


def assert_escaped(text: str, *hostile: str) -> None:
    assert not RAW_CONTROL.search(text), repr(RAW_CONTROL.search(text))
    for name in hostile:
        assert units.printable(name) in text, units.printable(name)


@pytest.mark.parametrize("fmt", ["tree", "table"])
def test_analyze_text_shows_control_characters_escaped(traces, fmt):
    out, err = cli("analyze", traces["base"], "-f", fmt)
    assert_escaped(out + err, CLASS)
    assert "Lin\\x1b[2Jear" in out
    if fmt == "tree":
        assert_escaped(out, DEVICE, OTHER_MODULE)
        assert "GPU\\x1b]0;pwned\\x07\\x1b[2J\\x9b" in out


@pytest.mark.parametrize("module", ["*", MODULE])
def test_ops_text_shows_control_characters_escaped(traces, module):
    out, _ = cli("analyze", traces["base"], "--ops", module)
    assert_escaped(out, OP, KERNEL)
    assert "-2+3\\x1b[31mred\\r" in out and "=1+2void k\\x1b]0;title\\x07()" in out
    tables = [t.splitlines() for t in out.split("\n\n")]  # ops, kernels, rows left out
    tables[0] = tables[0][1:]  # the title
    for header, _, *lines in (t for t in tables if len(t) > 2):  # measured on the escaped names
        calls = header.index("calls")
        assert all(line[calls - 2 : calls] == "  " and line[calls].isdigit() for line in lines), out


def test_diff_tree_shows_control_characters_escaped(traces):
    out, err = cli("diff", traces["base"], traces["new"])
    assert_escaped(out + err, DEVICE, KERNEL)


@pytest.mark.parametrize("fmt", ["tree", "table"])
def test_job_text_shows_control_characters_escaped(traces, fmt):
    job = analyze_job([traces["rank0"], traces["rank1"]], jobs=1)
    text = render.render_job(job, fmt)
    assert_escaped(text, MODULE)
    assert_escaped(render.get_job(fmt).render(job, render.RenderOptions()))


def test_warnings_on_stderr_show_control_characters_escaped(capsys):
    print_warnings([f"module {CLASS} dropped\r"])
    err = capsys.readouterr().err
    assert err == "traceprof: warning: module Lin\\x1b[2Jear dropped\\r\n"


def test_any_format_on_a_terminal_shows_control_characters_escaped(capsys, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    emit(f"name\n{OP}\n", None, [])
    assert capsys.readouterr().out == "name\n-2+3\\x1b[31mred\\r\n"


def test_printable_keeps_newlines_and_ordinary_text():
    text = "layer1.0 (Conv2d): 1.2 ms\n  élan 3×3 → ok \\x1b\n"
    assert units.printable(text) == text
    assert units.printable("a\x1bb\u202ec\x00\x7f") == "a\\x1bb\\u202ec\\x00\\x7f"

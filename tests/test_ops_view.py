"""The ops view (``traceprof analyze TRACE --ops MODULE``) a performance engineer reads, and the
numbers of every CSV.

1. Ops and kernels in two sections, each with shares of the module's time that add up to at most
   100% (an op row carries the GPU time of the kernels it launched: in one list the shares added
   up to 200%).
2. Rows without time (the Python frames of a ``with_stack`` trace) are not shown unless ``--all``
   asks for them; a line says how many were left out.
3. ``--ops NAME`` finds a module as ``ModuleProfile.find`` does (a unique part of a name is
   enough); a miss is one line that suggests close names, exit 3.
4. CSV times are written to the nanosecond, the resolution of trace timestamps, not with the
   noise of the large timestamps they were subtracted from (``309.437744140625``).
"""

from __future__ import annotations

import csv
import io
import re

import pytest
from click.testing import CliRunner

from traceprof.cli import main
from traceprof.render.csv_format import write_csv

from .conftest import SHARED_TRACES

#: recorded with_stack=True: dozens of Python frames inside every module
BERT = SHARED_TRACES / "module_tree" / "h100_bert_small_inference.json.gz"
ENCODER = "BertLMHeadModel_0.BertModel_0.BertEncoder_0"


def _run(*args: str):
    return CliRunner().invoke(main, ["analyze", str(BERT), *args])


def _ok(*args: str) -> str:
    r = _run(*args)
    assert r.exit_code == 0, (r.output, r.exception)
    return r.stdout


def _sections(text: str) -> list[list[dict[str, str]]]:
    """The rows of each table in an ops view (a header, a line of dashes, rows up to a blank
    line), as dicts of header -> cell."""
    lines = text.splitlines()
    tables = []
    for i, line in enumerate(lines[:-1]):
        if lines[i + 1].startswith("---"):
            starts = [m.start() for m in re.finditer(r"-+", lines[i + 1])]
            names = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
            rows = []
            for row in lines[i + 2 :]:
                if not row.strip():
                    break
                rows.append({n: row[a:b].strip() for n, a, b in zip(names, starts, starts[1:] + [None])})
            tables.append(rows)
    return tables


def _share(row: dict[str, str]) -> float:
    return float(row["share"].rstrip("%")) / 100


def test_ops_and_kernels_are_separate_sections_with_shares_up_to_100_percent():
    out = _ok("--ops", ENCODER)
    ops, kernels = _sections(out)
    assert ops and {r["kind"] for r in ops} == {"op"}, out
    assert kernels and {r["kind"] for r in kernels} == {"kernel"}, out
    for rows in (ops, kernels):
        assert 0.9 < sum(_share(r) for r in rows) <= 1.0 + 0.001 * len(rows), out


def test_rows_without_time_are_hidden_unless_all():
    out = _ok("--ops", ENCODER)
    assert "inspect.py(2501)" not in out and "(outside ops)" not in out
    assert all(r["GPU time"] != "0" for rows in _sections(out) for r in rows), out
    assert re.search(r"\b\d+ rows? without GPU time not shown \(--all shows them\)", out), out
    every = _ok("--ops", ENCODER, "--all")
    assert "inspect.py(2501): _signature_from_callable" in every and "not shown" not in every
    assert len(_sections(every)[0]) > len(_sections(out)[0]) + 20


def test_all_applies_to_the_ops_view_only():
    r = _run("--all")
    assert r.exit_code == 3 and r.output.count("\n") == 1 and "--all" in r.output, r.output


@pytest.mark.parametrize("name", ["encoder", "BertModel_0.BertEncoder_0", "BertEncoder"])
def test_a_unique_part_of_a_name_finds_the_module(name):
    # the heading names it by its short name (docs/cli.md): the qualified name is in the rows
    assert _ok("--ops", name).splitlines()[0].startswith("ops and kernels of BertEncoder_0 (BertEncoder) ")


def test_a_miss_suggests_close_modules_on_one_line():
    r = _run("--ops", "encodr")
    assert r.exit_code == 3, r.output
    assert r.output.count("\n") == 1 and r.output.startswith("traceprof: error: --ops: ")
    assert "did you mean" in r.output and "BertEncoder" in r.output, r.output
    r = _run("--ops", "attention")  # a part of several modules' names: they are listed
    assert r.exit_code == 3 and r.output.count("\n") == 1 and "BertAttention_0" in r.output, r.output


def test_every_node_view_keeps_each_node_under_100_percent_per_section():
    out = _ok("--ops", "*")
    sections = _sections(out)
    assert [{r["kind"] for r in rows} for rows in sections] == [{"op"}, {"kernel"}], out
    for rows in sections:
        per_node: dict[str, float] = {}
        for r in rows:
            assert r["GPU time"] != "0", r
            per_node[r["module"]] = per_node.get(r["module"], 0.0) + _share(r)
        assert max(per_node.values()) <= 1.0 + 0.001 * len(rows), per_node


# ---- CSV numbers ---------------------------------------------------------------------------------


def _decimals(cell: str) -> int:
    return len(cell.split(".", 1)[1]) if "." in cell and "e" not in cell.lower() else 0


@pytest.mark.parametrize("args", [(), ("--ops", "*")])
def test_csv_times_are_written_to_the_nanosecond(args):
    rows = list(csv.DictReader(io.StringIO(_ok(*args, "-f", "csv"))))
    cells = [(k, v) for r in rows for k, v in r.items() if k.endswith("_us") and v]
    assert cells
    noisy = [(k, v) for k, v in cells if _decimals(v) > 3]
    assert not noisy, noisy[:5]


def test_write_csv_rounds_times_and_keeps_other_numbers():
    text = write_csv(
        [{"a_us": 0.1 + 0.2, "b_us": 309.437744140625, "c_us": -0.0001, "share": 1 / 3, "n": 7}],
        ["a_us", "b_us", "c_us", "share", "n"],
    )
    assert text.splitlines()[1] == f"0.3,309.438,0.0,{1 / 3!r},7"

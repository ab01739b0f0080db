"""The single-trace terminal outputs read at a glance: the table fits the terminal's width
(narrowed, then columns left out with a note naming them, no row wider than the width), the
default columns leave out those with nothing in them for the trace, counts that are means over
several steps say so, and trees name modules by the last part of their path."""

from __future__ import annotations

import os
import re

import pytest

import traceprof
from traceprof.render import RenderOptions, render
from traceprof.render.table import DEFAULT_WIDTH, parse_columns, render_table, table_width

from .conftest import SAMPLE_TRACES, SHARED_TRACES
from .tracebuilder import TraceBuilder

#: CPU training: group names of the unattributed bucket, shapes, every pass
TRAINING = SAMPLE_TRACES / "resnet18_train_cpu.pt.trace.json.gz"
#: CPU inference: no backward, no other pass inside the modules
INFERENCE = SAMPLE_TRACES / "resnet18_infer_cpu.pt.trace.json.gz"
#: a with_stack trace: qualified names are paths of scope names
WITH_STACK = SHARED_TRACES / "module_tree" / "h100_bert_small_inference.json.gz"


@pytest.fixture(scope="module")
def training():
    return traceprof.analyze(TRAINING, depth=2)


@pytest.fixture(scope="module")
def inference():
    return traceprof.analyze(INFERENCE, depth=2)


def _table_rows(text: str) -> list[str]:
    """The table's lines from its first rule to the rule after its rows (not the prose above,
    nor the totals below)."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if set(line) == {"="})
    last = max(i for i, line in enumerate(lines) if line.startswith(("├─", "│")) or "depth-idx" in line)
    return lines[first : last + 2]


def _header(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("Layer (type:depth-idx)"))


def _note_lines(text: str) -> list[str]:
    """The columns note: its line and the lines under it indented under its text."""
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("columns:")), None)
    if first is None:
        return []
    more = 1
    while first + more < len(lines) and lines[first + more].startswith(" " * len("columns:   ")):
        more += 1
    return lines[first : first + more]


def _note(text: str) -> str:
    """The columns note as one line."""
    return " ".join(line.strip() for line in _note_lines(text))


# -- the width ------------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [60, 80, 100, 120, 160])
def test_no_row_is_wider_than_the_width(training, width):
    text = render_table(training, RenderOptions(), width)
    rows = _table_rows(text)
    assert len(rows) > 20
    assert max(len(r) for r in rows) <= width, width
    # every module row keeps its label whole: the tree's guides and depth-idx
    assert any(r.startswith("│    └─BasicBlock: 2-8") for r in rows)


def test_columns_are_narrowed_before_any_is_left_out(training):
    wide = render_table(training, RenderOptions(), 1000)
    assert _note(wide) == ""  # nothing left out: every default column this trace fills
    full = _header(wide)
    # a little narrower than the full table: group names are cut, no column is left out
    narrower = render_table(training, RenderOptions(), len(full) - 10)
    assert _note(narrower) == "" and _header(narrower).split() == full.split()
    assert max(len(r) for r in _table_rows(narrower)) <= len(full) - 10
    assert any("…" in r for r in _table_rows(narrower))


def test_left_out_columns_are_named_in_the_note(training):
    text = render_table(training, RenderOptions(), 80)
    note = _note(text)
    assert note.endswith("left out to fit 80 characters (COLUMNS sets the width)")
    left_out = re.match(r"columns:\s+(.*) left out", note).group(1).split(", ")
    header = _header(text)
    assert left_out and all(title not in header for title in left_out)
    # the least important go first: the measured times stay
    assert "Kernel Shape" in left_out and "Fwd CPU" in header and "CPU %" in header


@pytest.mark.parametrize("width", [60, 80, 100])
def test_the_columns_note_is_wrapped_to_the_table_and_cuts_no_column_name(training, width):
    text = render_table(training, RenderOptions(), width)
    lines = _note_lines(text)
    table = len(_table_rows(text)[0])  # the rule
    assert len(lines) > 1 and max(len(line) for line in lines) <= table <= width
    assert all(line.startswith(" " * len("columns:   ")) for line in lines[1:])
    left_out = re.match(r"columns:\s+(?:.* not shown: .*?; )?(.*) left out", _note(text)).group(1).split(", ")
    assert "Kernel Shape" in left_out
    for title in left_out:  # every name whole on one line
        assert any(title in line for line in lines), title


def test_the_width_is_columns_else_the_terminal_else_the_default(monkeypatch):
    monkeypatch.setenv("COLUMNS", "93")
    assert table_width() == 93
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr(os, "get_terminal_size", lambda fd=1: os.terminal_size((71, 24)))
    assert table_width() == 71

    def no_terminal(fd=1):
        raise OSError("not a terminal")

    monkeypatch.setattr(os, "get_terminal_size", no_terminal)
    assert table_width() == DEFAULT_WIDTH


def test_render_fits_columns(training, monkeypatch):
    monkeypatch.setenv("COLUMNS", "90")
    assert max(len(r) for r in _table_rows(render(training, "table"))) <= 90


# -- empty columns ---------------------------------------------------------------------------------


def test_columns_with_nothing_in_them_are_left_out_and_named(inference):
    text = render_table(inference, RenderOptions(), 1000)
    header = _header(text)
    assert "Fwd CPU" in header
    assert "Bwd CPU" not in header
    assert "Other CPU" in header  # the work outside the modules: zero in the modules only
    assert (
        _note(text) == "columns:   Bwd CPU not shown: nothing in them for this trace (--columns shows them)"
    )


def test_columns_asked_for_are_shown_even_empty(inference):
    text = render_table(inference, RenderOptions(columns=parse_columns("fwd,bwd")), 1000)
    assert _header(text).split()[2:] == ["Fwd", "CPU", "Bwd", "CPU"]
    assert _note(text) == ""


# -- mean counts -----------------------------------------------------------------------------------


def _two_steps() -> TraceBuilder:
    """A block called once in step 1 and twice in step 2: 1.5 calls and 1.5 kernels per step."""
    b = TraceBuilder()
    for step, t0, calls in ((1, 0, 1), (2, 1000, 2)):
        b.step(step, t0, 1000)
        b.scope("", "Net", t0 + 1, 900)
        for k in range(calls):
            t = t0 + 10 + 100 * k
            b.scope("block", "Block", t, 50)
            b.op("aten::mm", t + 1, 10, seq=t)
            b.launch(t + 2, t + 500, 4)
    return b


def test_mean_counts_say_they_are_means(analyze_built):
    p = analyze_built(_two_steps())
    assert p.selection.count == 2 and p.find("block").calls == pytest.approx(1.5)
    tree = render(p, "tree")
    per_step = next(line for line in tree.splitlines() if line.startswith("per step:"))
    assert per_step.endswith(", mean 1.5 kernels")
    assert "(Block)(" not in tree
    block = next(line for line in tree.splitlines() if line.lstrip().startswith("(block): Block("))
    assert block.endswith(", mean 1.5 calls)") or ", mean 1.5 calls," in block
    table = render_table(p, RenderOptions(columns=parse_columns("fwd,kernels,calls")), 200)
    assert _header(table).split()[2:] == ["Fwd", "GPU", "Mean", "kernels", "Mean", "calls"]
    assert "Kernels per step (mean): 1.5" in table


def test_counts_of_one_step_are_plain(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.scope("", "Net", 1, 900)
    b.op("aten::mm", 11, 10, seq=1)
    b.launch(12, 500, 4)
    p = analyze_built(b)
    tree = render(p, "tree")
    assert next(line for line in tree.splitlines() if line.startswith("per step:")).endswith(", 1 kernels")
    assert "mean" not in _header(render_table(p, RenderOptions(columns=parse_columns("kernels,calls")), 200))


# -- names -----------------------------------------------------------------------------------------


def test_trees_and_tables_name_modules_by_their_last_part():
    """A with_stack trace's qualified names are paths of scope names (BertLMHeadModel_0.
    BertModel_0...): the tree shows the last part, the table the class, neither the path."""
    p = traceprof.analyze(WITH_STACK)
    qualified = [n.qualified_name for n in p.nodes if n.qualified_name.count(".") >= 2]
    assert qualified and qualified[0].startswith("BertLMHeadModel_0.BertModel_0.")
    for fmt in ("tree", "table"):
        text = render(p, fmt)
        assert "BertLMHeadModel_0.BertModel_0" not in text, fmt
    assert "(BertEncoder_0): BertEncoder(" in render(p, "tree")

"""Deep module trees (issue 33, item 2): a trace of module scopes nested thousands of levels deep
is refused with one line, in bounded memory, before any output grows with its depth; every walk
of a tree, in every output of a profile, a job and a diff, is a loop, not a recursion; the
module table's descriptions and names are bounded as they are read."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import traceprof
from traceprof.cli import main
from traceprof.errors import TraceReadError
from traceprof.read.limits import MAX_SPEC_DEPTH, MAX_TREE_DEPTH
from traceprof.render import render

from .tracebuilder import TraceBuilder


def nested(levels: int, source: str = "nn.Module", rank: int | None = None) -> TraceBuilder:
    """A step with ``levels`` module scopes, each inside the one before, an op in the innermost:
    python_function events (``nn.Module``), traceprof scopes or user annotations."""
    b = TraceBuilder()
    if rank is not None:
        b.cpu_rank(rank)
    b.step(1, 0, 100_000)
    for i in range(levels):
        ts, dur = 10 + i, 90_000 - 2 * i
        if source == "nn.Module":
            b.py_module("Block", 0, ts, dur)
        elif source == "traceprof":
            b.scope(".".join(["b"] * i), "Block", ts, dur)
        else:
            b.annotation(f"level{i}", ts, dur)
    b.op("aten::add", 10 + levels + 0.5, 0.2)
    return b


def _frames() -> int:
    f, n = sys._getframe(), 0
    while f is not None:
        n, f = n + 1, f.f_back
    return n


def shallow_stack(fn):
    """``fn()`` with at most 100 frames of stack above this one: a walk that recurses once per
    level of a tree of MAX_TREE_DEPTH levels fails."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(_frames() + 100)
    try:
        return fn()
    finally:
        sys.setrecursionlimit(old)


# ---- deeper than the limit: one line, bounded memory --------------------------------------------


@pytest.mark.parametrize(
    "levels, source",
    [(1000, "nn.Module"), (5000, "nn.Module"), (1000, "traceprof"), (5000, "annotations")],
)
def test_a_tree_deeper_than_the_limit_is_one_line_in_bounded_memory(tmp_path, levels, source):
    path = nested(levels, source).write(tmp_path / "deep.json.gz", gz=True)
    hierarchy = "annotations" if source == "annotations" else "auto"
    limit = 2 * 2**30  # before: 800 MB of JSON at 1,000 levels, the OOM killer at 3,000
    for fmt in ("tree", "json", "html"):
        code = (
            "import resource, sys; from traceprof.cli import run; "
            f"resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit})); "
            f"sys.argv = ['traceprof', 'analyze', {str(path)!r}, '-f', {fmt!r}, "
            f"'--hierarchy', {hierarchy!r}]; run()"
        )
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert proc.stdout == ""
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr[-2000:]
        assert lines[0].startswith(f"traceprof: error: {path}: ")
        assert f"nested more than {MAX_TREE_DEPTH} levels deep" in lines[0]


def test_the_api_raises_the_same_error(tmp_path):
    path = nested(MAX_TREE_DEPTH + 1).write(tmp_path / "deep.json")
    with pytest.raises(
        TraceReadError, match=f"python_function nn.Module events .* nested more than {MAX_TREE_DEPTH}"
    ):
        traceprof.analyze(path)
    assert (
        len(traceprof.analyze(nested(MAX_TREE_DEPTH).write(tmp_path / "ok.json")).nodes) == MAX_TREE_DEPTH + 2
    )


# ---- at the limit: every walk is a loop -----------------------------------------------------------


@pytest.fixture(scope="module")
def at_the_limit(tmp_path_factory) -> Path:
    """A trace of MAX_TREE_DEPTH levels, every output's imports done beforehand on a shallow one
    (importing pandas or pyarrow takes a deep stack of its own)."""
    directory = tmp_path_factory.mktemp("deep")
    shallow = nested(3).write(directory / "shallow.json")
    for fmt in ("tree", "table", "json", "csv", "html", "parquet"):
        render(traceprof.analyze(shallow), fmt)
    traceprof.analyze(shallow).to_dataframe()
    CliRunner().invoke(main, ["diff", str(shallow), str(shallow), "-f", "html"])
    return nested(MAX_TREE_DEPTH).write(directory / "deep.json")


def test_every_output_of_a_profile_walks_without_recursion(at_the_limit):
    profile = traceprof.analyze(at_the_limit)
    deepest = max(n.depth for n in profile.nodes)
    assert deepest == MAX_TREE_DEPTH - 1
    for fmt in ("tree", "table", "json", "csv", "html", "parquet"):
        out = shallow_stack(lambda fmt=fmt: render(profile, fmt))  # before: RecursionError in tree
        assert out
    for shaped in (
        lambda: traceprof.top_children(profile, 1),  # before: RecursionError
        lambda: traceprof.sort_children(profile, "cpu"),
        lambda: traceprof.limit_depth(profile, MAX_TREE_DEPTH - 2),
    ):
        result = shallow_stack(shaped)
        result.self_check()
        assert max(n.depth for n in result.nodes) >= MAX_TREE_DEPTH - 2
    sorted_profile = traceprof.sort_children(profile, "cpu")
    assert [n.qualified_name for n in sorted_profile.walk()] == [n.qualified_name for n in profile.walk()]
    tree = render(profile, "tree")
    assert tree.count("(Block_0): Block(") == MAX_TREE_DEPTH - 1
    for args in (["--ops", "*"], ["--top", "1"], ["-f", "table"]):
        result = shallow_stack(
            lambda args=args: CliRunner().invoke(main, ["analyze", str(at_the_limit), *args])
        )
        assert result.exit_code == 0, result.output[-2000:]


def test_a_job_and_a_diff_of_deep_trees_walk_without_recursion(tmp_path, at_the_limit):
    ranks = [nested(MAX_TREE_DEPTH, rank=r).write(tmp_path / f"deep_rank{r}.json") for r in (0, 1)]
    for fmt in ("tree", "table", "json", "csv", "html"):
        result = shallow_stack(
            lambda fmt=fmt: CliRunner().invoke(main, ["analyze", str(tmp_path), "-j", "1", "-f", fmt])
        )
        assert result.exit_code == 0, result.output[-2000:]  # before: RecursionError
    job = traceprof.analyze_job([str(p) for p in ranks], jobs=1)
    shaped = shallow_stack(lambda: job.shaped(top=1, all_rows=False))
    assert len(shaped.modules) >= MAX_TREE_DEPTH
    for fmt in ("tree", "json", "csv", "html"):
        result = shallow_stack(
            lambda fmt=fmt: CliRunner().invoke(main, ["diff", str(ranks[0]), str(ranks[1]), "-f", fmt])
        )
        assert result.exit_code == 0, result.output[-2000:]
    diff = traceprof.diff(str(ranks[0]), str(ranks[1]))
    assert len(shallow_stack(lambda: diff.shaped(top=1)).nodes) >= MAX_TREE_DEPTH


# ---- the module table: descriptions and names bounded as they are read ---------------------------


def _with_table(tmp_path: Path, modules: list[dict]) -> Path:
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.scope("", "Net", 10, 900)
    b.op("aten::add", 20, 5)
    table = {"format": "traceprof.modules", "version": 1, "modules": modules}
    b.top["traceprof"] = base64.b64encode(json.dumps(table).encode()).decode()
    return b.write(tmp_path / "table.json")


def test_a_module_table_description_is_read_to_a_bounded_depth(tmp_path, at_the_limit):
    deep: object = {"shape": [2, 3], "dtype": "float32"}
    for _ in range(900):  # json reads it; every walk of a description recursed through all of it
        deep = [deep]
    path = _with_table(tmp_path, [{"name": "", "class": "Net", "inputs": [deep], "outputs": deep}])
    profile = traceprof.analyze(path)
    spec = profile.find("").info.inputs
    depth = 0
    while isinstance(spec, list):
        spec, depth = spec[0], depth + 1
    assert spec is None and depth == MAX_SPEC_DEPTH
    for fmt in ("tree", "table", "json", "html"):
        assert shallow_stack(lambda fmt=fmt: render(profile, fmt))


def test_a_module_table_with_names_deeper_than_the_limit_is_ignored_with_a_warning(tmp_path):
    name = ".".join(["b"] * (MAX_TREE_DEPTH + 1))
    path = _with_table(tmp_path, [{"name": "", "class": "Net"}, {"name": name, "class": "Block"}])
    profile = traceprof.analyze(path)
    assert profile.metadata.module_table is None
    assert any(f"module name of more than {MAX_TREE_DEPTH} parts" in w for w in profile.warnings)

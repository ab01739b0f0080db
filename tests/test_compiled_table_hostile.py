"""A compiled-kernel table written to hurt (docs/security.md): symbolic sizes are parsed, never
evaluated; sizes and dimensions past any tensor's are not costed, with a warning; module paths
that name no module of the model invent no node; the matching of a run's kernel calls is not
quadratic; the table counts against the memory limit like events."""

from __future__ import annotations

import subprocess
import sys

import pytest

import traceprof
from traceprof.analysis import compiled, compiled_args, compiled_runs
from traceprof.analysis.compiled_args import MAX_SIZE, SizeOutOfRange
from traceprof.analysis.compiled_args import size_of as _size
from traceprof.analysis.compiled_runs import walk as _walk
from traceprof.errors import MemoryLimitError
from traceprof.flops.shapes import ArgumentError
from traceprof.result.model import NodeKind

from .test_compiled_analysis import (
    BACKWARD,
    MODULES,
    graph,
    node,
    site,
    tensor,
    training_step,
    with_tables,
)
from .tracebuilder import TraceBuilder


@pytest.mark.parametrize(
    ("text", "value"),
    [("s0", 8), ("2*s1", 6), ("(s0 + 1)//2", 4), ("s0/3", 2), ("Max(1, s0 - 9)", 1), ("Min(s0, s1) % 2", 1)],
)
def test_symbolic_sizes_are_parsed(text, value):
    assert _size(text, {"s0": 8, "s1": 3}) == value


@pytest.mark.parametrize(
    "text",
    [
        "9**9**9",
        "s0 ** 2",
        "__import__('os').system('true')",
        "s0.__class__",
        "(" * 40 + "1" + ")" * 40,
        "s0/0",
    ],
)
def test_hostile_symbolic_sizes_are_refused_never_evaluated(text):
    with pytest.raises(ArgumentError):
        _size(text, {"s0": 8})


def test_sizes_past_any_tensor_are_out_of_range():
    for value in (10**30, MAX_SIZE + 1, "s0*s0*s0*s0*s0", "1" * 30):
        with pytest.raises(SizeOutOfRange):
            _size(value, {"s0": 10**6})


def hostile_forward(shape_a, shape_b, module_paths=("a.act", "a.lin", "b")) -> dict:
    """The FORWARD graph with its first node's input of shape ``shape_a``, its second's of
    ``shape_b``, and its nodes' modules renamed to ``module_paths``."""
    act, lin, other = module_paths
    return graph(
        "ffwd",
        "forward",
        [
            site("cpp", "graph_0_cpp_fused_gelu_0", ["gelu"], act),
            site("extern", "aten::addmm", ["addmm"], lin, primary="addmm"),
            site("cpp", "graph_0_cpp_fused_gelu_0", ["gelu_1"], other),
            site("cpp", "graph_0_cpp_fused_add_gelu_1", ["add", "gelu_2"], "a"),
        ],
        {
            "gelu": node("aten.gelu.default", [{"shape": shape_a, "dtype": "float32"}], act, "GELU"),
            "addmm": node("aten.addmm.default", [tensor(16), tensor(4, 8), tensor(8, 16)], lin, "Linear"),
            "gelu_1": node("aten.gelu.default", [{"shape": shape_b, "dtype": "float32"}], other, "Linear"),
            "add": node("aten.add.Tensor", [tensor(4, 16), tensor(4, 16)], lin, "Linear"),
            "gelu_2": node("aten.gelu.default", [tensor(4, 16)], act, "GELU"),
        },
    )


def test_sizes_past_any_tensor_are_a_warning_not_a_number(analyze_built):
    """A shape of 10**30 elements printed 1.8e61 FLOP per step; 100,000 dimensions took 15 s and
    1.4 GB, then an OverflowError traceback. Both are left uncosted, with one warning."""
    fwd = hostile_forward([10**15, 10**15], ["s77"] * 100_000)
    p = analyze_built(with_tables(training_step(TraceBuilder()), [fwd, BACKWARD], MODULES))
    assert p.selection.flops < 1e12
    warning = next(w for w in p.warnings if "past any tensor's" in w)
    assert warning.startswith("compiled-kernel table") is False and "2 distinct nodes" in warning
    assert p.find("a.act").forward.total.cpu_us > 0  # the kernels keep their time and module


@pytest.mark.parametrize(
    "bad", ["no.such.module.path", "a..act", "..", "a.act\x00x", "a." + "x." * 300 + "y"]
)
def test_module_paths_that_name_no_module_invent_no_node(analyze_built, bad):
    fwd = hostile_forward([4, 8], [4, 16], (bad, "a.lin", "b"))
    p = analyze_built(with_tables(training_step(TraceBuilder()), [fwd, BACKWARD], MODULES))
    modules = {n.qualified_name for n in p.walk() if n.kind is NodeKind.MODULE}
    assert modules == {name for name, _ in MODULES}
    roots = [p.nodes[r] for r in p.roots if p.nodes[r].kind is NodeKind.MODULE]
    assert len(roots) == 1
    assert any("name no module of the model" in w for w in p.warnings)


class CountingList(list):
    """A list that counts its item reads."""

    reads = 0

    def __getitem__(self, index):
        CountingList.reads += 1
        return super().__getitem__(index)


def test_matching_kernel_calls_is_not_quadratic():
    """N children matching none of N call sites took N**2 steps (32k: 53 s); the sites of
    each name are found by bisection."""
    n = 4000
    sites = CountingList(range(n))
    CountingList.reads = 0
    assert _walk(list(range(n, 2 * n)), sites) == [-1] * n
    assert CountingList.reads <= 4 * n  # was about n * n / 2
    CountingList.reads = 0
    assert _walk(list(range(n)), CountingList(range(n))) == list(range(n))
    assert CountingList.reads <= 4 * n


def test_an_embedded_table_counts_against_the_memory_limit(tmp_path, monkeypatch):
    """A compiled-kernel table of 300,000 nodes is 13 MB of base64 but hundreds of MB of Python
    objects: past --max-memory it stops the load with one line, as events do."""
    nodes = {f"n{i}": {"op": "aten.gelu.default"} for i in range(300_000)}
    table = graph("fbig", "forward", [site("cpp", "graph_0_cpp_fused_gelu_0", ["gelu"], "a")], nodes)
    path = with_tables(training_step(TraceBuilder()), [table], MODULES).write(tmp_path / "big.json")
    with pytest.raises(MemoryLimitError, match=r"compiled-kernel table .* needs more than the memory limit"):
        traceprof.analyze(path, max_memory="64M")
    proc = subprocess.run(
        [sys.executable, "-m", "traceprof", "analyze", str(path), "--max-memory", "64M"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 5
    assert len(proc.stderr.strip().splitlines()) == 1 and "big.json" in proc.stderr
    assert "Traceback" not in proc.stderr
    # within the limit it loads (the nodes are no call site's: nothing to cost)
    assert traceprof.analyze(path, max_memory="4G").metadata.compiled_table is not None


def test_the_matching_does_not_use_eval():
    for module in (compiled, compiled_args, compiled_runs):
        assert "eval(" not in open(module.__file__, encoding="utf-8").read()

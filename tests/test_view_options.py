"""The shaping options of analyze on diff, job and --ops (docs/diff.md "Shaping", docs/jobs.md
"Shaping the modules"): --depth, --top, --sort, --step, --ignore, --all with the same names,
defaults and one-line errors as analyze's; short display names in the text views, the
qualified names unchanged in the data formats.

Goldens: ``python -m pytest tests/test_view_options.py --update-golden`` rewrites
tests/golden/view_*."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import traceprof
from traceprof.cli import main
from traceprof.compare.nodes import Status
from traceprof.render.diff import render_diff
from traceprof.result.model import NodeKind

from .conftest import SAMPLE_TRACES
from .test_diff import model
from .test_job_stragglers import STEP_US
from .tracebuilder import TraceBuilder

GOLDEN = Path(__file__).parent / "golden"
BASE_SAMPLE = SAMPLE_TRACES / "gpt_diff_base_cpu.pt.trace.json.gz"
WIDE_SAMPLE = SAMPLE_TRACES / "gpt_diff_wide_mlp_cpu.pt.trace.json.gz"
RESNET = SAMPLE_TRACES / "resnet18_train_cpu.pt.trace.json.gz"
#: lines of one terminal screen
SCREEN = 40


def _golden(name: str, out: str, update: bool) -> None:
    golden = GOLDEN / name
    if update or not golden.exists():
        golden.write_text(out)
        if not update:
            pytest.fail(f"{golden.name} was missing and has been written; rerun")
    assert out == golden.read_text(), f"{golden.name} differs (rerun with --update-golden)"


def _cli(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def _ok(*args: str) -> str:
    r = _cli(*args)
    assert r.exit_code == 0, (r.output, r.exception)
    return r.stdout


def _one_line_error(r, *words: str) -> None:
    assert r.exit_code == 3, (r.exit_code, r.output)
    assert r.output.count("\n") == 1 and r.output.startswith("traceprof: error: "), r.output
    assert "Traceback" not in r.output
    for w in words:
        assert w in r.output, r.output


# ---- diff ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_diff():
    return traceprof.diff(BASE_SAMPLE, WIDE_SAMPLE)


def test_the_sample_gpt_diff_at_depth_2_top_5_fits_on_one_screen(update_golden, monkeypatch):
    monkeypatch.chdir(SAMPLE_TRACES.parent)  # relative paths in the golden
    out = _ok(
        "diff",
        *(p.relative_to(SAMPLE_TRACES.parent) for p in (BASE_SAMPLE, WIDE_SAMPLE)),
        "--depth",
        "2",
        "--top",
        "5",
    )
    lines = out.splitlines()
    assert len(lines) <= SCREEN, out
    # the path to the change, by short names; the most changed modules of the whole diff
    assert "most changed (own time): h.2.mlp.c_fc " in out, out
    assert "\n    h (ModuleList): " in out and "transformer.h (" not in out, out
    assert max(len(line) for line in lines) < 200
    _golden("view_diff_gpt_depth2_top5.txt", out, update_golden)


def test_shaping_a_diff_keeps_every_shown_number(sample_diff):
    d = sample_diff
    shaped = d.shaped(depth=2, top=2)
    assert shaped.full is d and shaped.overview
    assert max(n.depth for n in shaped.nodes) == 2
    for n in shaped.nodes:
        if n.kind is NodeKind.OTHERS:  # "(k more)": its siblings' changes added up
            continue
        whole = d.find(n.key) if n.kind is NodeKind.MODULE else next(m for m in d.nodes if m.key == n.key)
        assert (n.base_us, n.new_us) == (whole.base_us, whole.new_us)
    for n in shaped.nodes:
        kids = [shaped.nodes[c] for c in n.children]
        if kids and any(k.kind is NodeKind.OTHERS for k in kids):
            full_kids = d.nodes[next(m.id for m in d.nodes if m.key == n.key)].children
            assert sum(k.delta_us for k in kids) == pytest.approx(sum(d.nodes[c].delta_us for c in full_kids))
            assert len([k for k in kids if k.kind is not NodeKind.OTHERS]) == 2
    # "most changed" ranks every module of the diff, also those below the depth
    assert [n.qualified_name for n, _ in shaped.most_changed()[:2]] == [
        n.qualified_name for n in d.ranked()[:2]
    ]


def test_diff_sort_keys(sample_diff):
    d = sample_diff
    gpt = d.nodes[d.roots[0]]
    in_order = d.shaped(sort="order")
    kids = [in_order.nodes[c].qualified_name for c in in_order.nodes[in_order.roots[0]].children]
    assert kids == ["transformer", "lm_head"]  # as the model runs them
    by_name = d.shaped(sort="name", depth=3)
    h = by_name.find("transformer.h")
    assert [by_name.nodes[c].name for c in h.children] == ["0", "1", "2", "3"]
    by_bwd = d.shaped(sort="bwd")
    first = by_bwd.nodes[by_bwd.nodes[by_bwd.roots[0]].children[0]]
    assert abs(first.phase("backward").delta_us) == max(
        abs(d.nodes[c].phase("backward").delta_us) for c in gpt.children
    )
    # the default: the largest change first, the order compare() gives
    assert [n.key for n in d.shaped().nodes] == [n.key for n in d.nodes]
    # the bucket stays last among the roots
    assert in_order.nodes[in_order.roots[-1]].kind is NodeKind.UNATTRIBUTED


def test_diff_ignore_hides_modules_and_keeps_their_change_in_the_parent(sample_diff):
    shaped = sample_diff.shaped(ignore=["MLP"])
    assert not [n for n in shaped.nodes if n.class_name == "MLP"]
    assert shaped.find("transformer.h.2").delta_us == sample_diff.find("transformer.h.2").delta_us


def test_diff_step_compares_one_step_of_each_trace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model(fc_us=(30.0, 60.0)).write(Path("base.json"))
    model(fc_us=(30.0, 90.0)).write(Path("new.json"))
    whole = traceprof.diff("base.json", "new.json")
    one = traceprof.diff("base.json", "new.json", step=2)
    assert one.base.steps == (2,) and one.new.steps == (2,)
    assert one.find("fc").delta_us == pytest.approx(30.0)
    assert whole.find("fc").delta_us == pytest.approx(15.0)  # the mean of the two steps
    assert any("step 2 of both traces is compared alone" in w for w in one.warnings), one.warnings
    out = _ok("diff", "base.json", "new.json", "--step", "2")
    assert "fc (Linear): 60.0 us -> 90.0 us" in out, out


def test_overview_golden_on_built_traces(tmp_path, monkeypatch, update_golden):
    monkeypatch.chdir(tmp_path)
    model(act_name="act").write(Path("base.json"))
    model(fc_us=(45.0, 45.0), fc_kernel="gemm_b", extra="drop").write(Path("new.json"))
    out = _ok("diff", "base.json", "new.json", "--depth", "1", "--top", "1", "--sort", "name")
    assert "(2 more)" in out, out
    _golden("view_diff_built_depth1_top1_name.txt", out, update_golden)
    # the data formats keep every node's qualified name and the shaped rows
    doc = json.loads(_ok("diff", "base.json", "new.json", "--top", "1", "-f", "json"))
    keys = {n["key"] for n in doc["nodes"]}
    assert "(Net)/(more)" in keys and len([k for k in keys if k.startswith("fc ")]) <= 1, keys


@pytest.mark.parametrize(
    "args, words",
    [
        (["--depth", "-1"], ["--depth", "-1"]),
        (["--top", "0"], ["--top", "0"]),
        (["--sort", "fast"], ["--sort", "fast"]),
        (["--step", "x"], ["--step", "'x'"]),
        (["--step", "7"], ["step 7 is not in the trace"]),
        (["--sort", "cpu"], ["--sort cpu", "GPU busy time"]),
    ],
)
def test_diff_bad_shaping_values_are_one_line_errors(tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    model().write(Path("base.json"))
    model(fc_us=(40.0, 40.0)).write(Path("new.json"))
    _one_line_error(_cli("diff", "base.json", "new.json", *args), *words)


def test_diff_tree_names_modules_by_short_names_and_json_by_qualified_ones(sample_diff):
    text = render_diff(sample_diff, "tree")
    assert "\n      2 (Block): " in text and "transformer.h.2 (Block)" not in text
    doc = json.loads(render_diff(sample_diff, "json"))
    assert "transformer.h.2.mlp" in {n["qualified_name"] for n in doc["nodes"]}
    assert all(n.status is Status.MATCHED for n in sample_diff.nodes)


# ---- job ----------------------------------------------------------------------------------------


def _cpu_rank(rank: int, block_us: float) -> TraceBuilder:
    """Two steps of a CPU rank (gloo): Net -> encoder -> encoder.block (``block_us`` of work)
    and encoder.idle (no time), then the wait for the other rank."""
    b = TraceBuilder(pid=100 + rank).cpu_rank(rank)
    for n in (1, 2):
        t = n * 20_000.0
        b.step(n, t, STEP_US)
        b.scope("", "Net", t + 100, block_us + 300)
        b.scope("encoder", "Encoder", t + 120, block_us + 250)
        b.scope("encoder.block", "Block", t + 150, block_us + 100)
        b.op("aten::mm", t + 200, block_us)
        b.scope("encoder.idle", "Identity", t + block_us + 300, 0)
        b.annotation("gloo:all_reduce", t + block_us + 500, 9_000 - block_us, tid=2)
    return b


def _cpu_job_dir(tmp_path: Path) -> Path:
    """Two CPU ranks, rank 1 the straggler; a module without time on any rank."""
    d = tmp_path / "job"
    d.mkdir()
    for rank, block in ((0, 1_000), (1, 7_000)):
        _cpu_rank(rank, block).write(d / f"rank{rank}.json")
    return d


def test_job_rows_sorted_top_and_zero_rows_hidden_with_a_count(tmp_path, update_golden):
    d = _cpu_job_dir(tmp_path)
    out = _ok("analyze", d, "-j", "1", "--sort", "cpu", "--top", "1")
    assert "module without time on any rank not shown (--all shows them)" in out, out
    assert "idle (Identity)" not in out
    every = _ok("analyze", d, "-j", "1", "--all")
    assert "idle (Identity)" in every and "not shown" not in every
    _golden("view_job_sort_cpu_top1.txt", out.replace(str(tmp_path), "TMP"), update_golden)


def test_job_shaping_in_the_api(tmp_path):
    d = _cpu_job_dir(tmp_path)
    job = traceprof.analyze_job(d, jobs=1)
    assert [m.name for m in job.shaped(depth=0).modules] == [m.name for m in job.modules if m.depth == 0]
    shown = job.shaped(all_rows=False)
    assert shown.hidden_modules == 1 and "idle" not in {m.name for m in shown.modules}
    by_name = job.shaped(sort="name")
    net = [m for m in by_name.modules if m.depth == 1 and m.kind is NodeKind.MODULE]
    assert [m.name for m in net] == sorted(m.name for m in net)
    top = job.shaped(top=1)
    [more] = [m for m in top.modules if m.qualified_name == "encoder/(more)"]  # encoder.idle
    assert more.kind is NodeKind.OTHERS and more.name == "(1 more)"
    assert more.times(job.metric) == {0: 0.0, 1: 0.0}
    assert traceprof.analyze_job(d, jobs=1, depth=0).modules == job.shaped(depth=0).modules
    # the tidy rows keep qualified names
    assert "encoder.block" in {r["qualified_name"] for r in job.rows()}


@pytest.mark.parametrize(
    "args, words",
    [
        (["--depth", "-2"], ["--depth"]),
        (["--top", "0"], ["--top"]),
        (["--sort", "slow"], ["--sort", "slow"]),
    ],
)
def test_job_bad_shaping_values_are_one_line_errors(tmp_path, args, words):
    _one_line_error(_cli("analyze", _cpu_job_dir(tmp_path), "-j", "1", *args), *words)


def test_straggler_lines_name_modules_by_short_names(tmp_path):
    out = _ok("analyze", _cpu_job_dir(tmp_path), "-j", "1")
    [line] = [x for x in out.splitlines() if "modules against" in x]
    assert "): block +6.00 ms" in line and "encoder.block" not in line, line  # over the faster rank


# ---- --ops --------------------------------------------------------------------------------------


def test_ops_top_and_sort(update_golden):
    out = _ok("analyze", RESNET, "--ops", "layer1.0", "--top", "3", "--sort", "calls")
    assert out.startswith("ops and kernels of 0 (BasicBlock) ") or out.startswith(
        "ops and kernels of layer1.0 "
    )
    assert "by calls" in out.splitlines()[0]
    assert "more rows past --top not shown" in out
    _golden("view_ops_top3_calls.txt", out, update_golden)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--sort", "fwd"], ["--sort fwd does not apply to --ops"]),
        (["--top", "0"], ["--top"]),
    ],
)
def test_ops_bad_shaping_values_are_one_line_errors(args, words):
    _one_line_error(_cli("analyze", RESNET, "--ops", "layer1.0", *args), *words)


# ---- one shaping rule for every view (--top keeps the largest, --sort orders them) -------------


def _ops_json(*args: str) -> list[dict]:
    return json.loads(_ok("analyze", BASE_SAMPLE, "--ops", "h.2", "--format", "json", *args))["rows"]


def test_ops_top_keeps_the_largest_rows_and_sort_orders_them():
    every = _ops_json()
    rows = _ops_json("--sort", "name", "--top", "2")
    for kind in ("op", "kernel"):
        largest = sorted((r for r in every if r["kind"] == kind), key=lambda r: -r["cpu_us"])[:2]
        kept = [r for r in rows if r["kind"] == kind]
        assert {r["name"] for r in kept} == {r["name"] for r in largest}, (kind, kept)
        assert [r["name"] for r in kept] == sorted(r["name"] for r in kept)
    assert any(r["name"].endswith("AddmmBackward0") for r in rows)  # the module's largest op (12 ms)


@pytest.mark.parametrize("shape", [["--depth", "1"], ["--depth", "0"], ["--ignore", "Block"]])
def test_ops_finds_the_module_whatever_the_tree_shows(shape):
    assert _ops_json(*shape) == _ops_json()


def test_diff_top_keeps_the_largest_of_equal_changes():
    same = traceprof.diff(BASE_SAMPLE, BASE_SAMPLE)  # every change 0
    shaped = same.shaped(top=2)
    full = {n.key: n for n in same.nodes}

    def size(key: str) -> float:
        return max(full[key].base_us, full[key].new_us)

    folds = 0
    for node in shaped.nodes:
        kids = [shaped.nodes[c] for c in node.children]
        if not any(k.kind is NodeKind.OTHERS for k in kids):
            continue
        folds += 1
        shown = [k.key for k in kids if k.kind is not NodeKind.OTHERS]
        folded = [same.nodes[c].key for c in full[node.key].children if same.nodes[c].key not in shown]
        assert min(size(k) for k in shown) >= max(size(k) for k in folded), node.qualified_name
        assert [size(k) for k in shown] == sorted(map(size, shown), reverse=True)  # the larger first
    assert folds > 0


def _matched_line(out: str) -> str:
    [line] = [x for x in out.splitlines() if x.startswith("modules:")]
    return line


@pytest.mark.parametrize("shape", [[], ["--depth", "0", "--top", "1"], ["--ignore", "Block"]])
def test_job_header_counts_every_matched_module_however_shaped(tmp_path, shape):
    d = _cpu_job_dir(tmp_path)
    job = traceprof.analyze_job(d, jobs=1)  # unshaped: every module matched
    line = _matched_line(_ok("analyze", d, "-j", "1", *shape))
    modules = sum(m.kind is traceprof.NodeKind.MODULE for m in job.modules)  # not the bucket's groups
    assert job.matched_modules == modules
    assert f" {modules} nodes matched across ranks" in line, line
    assert job.shaped(depth=0, top=1, all_rows=False).matched_modules == modules

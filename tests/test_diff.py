"""traceprof diff: traces built in code (one change each, found and reported as what it is), the
sample pair (a widened MLP), golden outputs, the command line and its exit codes.

Goldens: ``python -m pytest tests/test_diff.py --update-golden`` rewrites tests/golden/diff_*.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import traceprof
from traceprof.cli import main
from traceprof.compare.diff import SLOWER_EXIT_CODE
from traceprof.compare.match import compare
from traceprof.compare.nodes import Status
from traceprof.compare.side import side_of
from traceprof.render.diff import DIFF_REGISTRY, render_diff
from traceprof.result.model import Pass

from .conftest import SAMPLE_TRACES
from .tracebuilder import TraceBuilder

GOLDEN = Path(__file__).parent / "golden"
BASE_SAMPLE = SAMPLE_TRACES / "gpt_diff_base_cpu.pt.trace.json.gz"
WIDE_SAMPLE = SAMPLE_TRACES / "gpt_diff_wide_mlp_cpu.pt.trace.json.gz"


def model(
    steps=(1, 2),
    fc_us=(30.0, 30.0),
    act_us=10.0,
    fc_kernel="gemm_a",
    act_name="act",
    extra: str | None = None,
    jitter=0.0,
    gpu=True,
    cpu_only_dur=None,
) -> TraceBuilder:
    """Net -> fc (Linear: one kernel), act (ReLU: one kernel) [, extra (Dropout: one kernel)],
    one ProfilerStep each; ``fc_us``: fc's kernel time per step; ``jitter``: added to act's
    kernel in odd steps (step-to-step noise)."""
    b = TraceBuilder()
    if not gpu:
        b.top["deviceProperties"] = []
    for i, n in enumerate(steps):
        t0 = i * 1000.0
        b.step(n, t0, 900)
        b.scope("", "Net", t0 + 10, 600)
        b.scope("fc", "Linear", t0 + 20, 100)
        b.op("aten::addmm", t0 + 30, cpu_only_dur or 50, seq=n * 10 + 1)
        if gpu:
            b.launch(t0 + 40, t0 + 200, fc_us[i % len(fc_us)], name=fc_kernel)
        b.scope(act_name, "ReLU", t0 + 150, 50)
        b.op("aten::relu", t0 + 160, 20, seq=n * 10 + 2)
        if gpu:
            b.launch(t0 + 165, t0 + 300, act_us + (jitter if i % 2 else 0.0), name="relu_kernel")
        if extra:
            b.scope(extra, "Dropout", t0 + 250, 50)
            b.op("aten::dropout", t0 + 260, 20, seq=n * 10 + 3)
            if gpu:
                b.launch(t0 + 265, t0 + 400, 5, name="dropout_kernel")
    return b


@pytest.fixture
def built(tmp_path, monkeypatch):
    """Write two builders as base.json and new.json (relative names, stable in goldens) and diff
    them; returns the DiffProfile."""
    monkeypatch.chdir(tmp_path)

    def run(base: TraceBuilder, new: TraceBuilder, **kw):
        base.write(Path("base.json"))
        new.write(Path("new.json"))
        for side in ("base.json", "new.json"):
            traceprof.analyze(side).self_check()
        return traceprof.diff("base.json", "new.json", **kw)

    return run


def test_a_module_made_slower_is_found_first_with_its_kernel(built):
    d = built(model(), model(fc_us=(60.0, 60.0)))
    fc = d.find("fc")
    assert fc.status is Status.MATCHED
    assert fc.phase(Pass.FORWARD).base_us == pytest.approx(30)
    assert fc.phase(Pass.FORWARD).new_us == pytest.approx(60)
    assert fc.delta_us == pytest.approx(30) and fc.delta_ratio == pytest.approx(1.0)
    assert d.find("act").delta_us == pytest.approx(0)
    assert d.ranked()[0].qualified_name == "fc"
    net = d.nodes[d.roots[0]]
    assert d.nodes[net.children[0]].qualified_name == "fc"  # siblings by |Δ|
    [k] = fc.inside
    assert (k.kind, k.name, k.status, k.delta_us) == ("kernel", "gemm_a", Status.MATCHED, pytest.approx(30))
    assert d.wall_delta_us == 0  # same step spans
    assert dict(d.where())["modules"] == pytest.approx(30)
    assert d.slower(10) is None  # the step's wall time did not change
    assert "module fc is 100.0% slower" in d.slower(10, module="fc")


def test_a_module_added_is_reported_as_added(built):
    d = built(model(), model(extra="drop"))
    drop = d.find("drop")
    assert drop.status is Status.ADDED
    assert (drop.base_us, drop.new_us) == (0, pytest.approx(5))
    assert {n.qualified_name for n in d.modules() if n.status is not Status.MATCHED} == {"drop"}
    removed = built(model(extra="drop"), model()).find("drop")
    assert removed.status is Status.REMOVED and removed.delta_us == pytest.approx(-5)


def test_a_swapped_kernel_is_one_removed_and_one_added(built):
    d = built(model(), model(fc_us=(45.0, 45.0), fc_kernel="gemm_b"))
    fc = d.find("fc")
    assert fc.status is Status.MATCHED
    inside = {(i.name, i.status) for i in fc.inside}
    assert inside == {("gemm_a", Status.REMOVED), ("gemm_b", Status.ADDED)}
    by_name = {i.name: i for i in fc.inside}
    assert by_name["gemm_a"].base_us == pytest.approx(30) and by_name["gemm_a"].new_us == 0
    assert by_name["gemm_b"].new_us == pytest.approx(45)
    text = render_diff(d, "tree")
    assert "> kernel gemm_a (fwd) [removed]: 30.0 us -> 0 (-30.0 us)" in text
    assert "> kernel gemm_b (fwd) [added]: 0 -> 45.0 us (+45.0 us)" in text


def test_a_renamed_module_is_removed_and_added_not_matched(built):
    d = built(model(), model(act_name="activation"))
    assert d.find("act").status is Status.REMOVED
    assert d.find("activation").status is Status.ADDED
    assert d.find("fc").status is Status.MATCHED


def test_python_function_trees_match_by_class_path_and_call_order(built):
    def py(second_linear: bool, t=9.0):
        b = TraceBuilder()
        for i, n in enumerate((1, 2)):
            t0 = i * 1000.0
            b.step(n, t0, 900)
            b.py_module("Net", 0, t0 + 10, 500)
            b.py_module("Linear", 3, t0 + 20, 100)
            b.op("aten::mm", t0 + 30, 10, seq=n * 10 + 1)
            b.launch(t0 + 31, t0 + 200, t)
            if second_linear:
                b.py_module("Linear", 4, t0 + 130, 100)
                b.op("aten::mm", t0 + 140, 10, seq=n * 10 + 2)
                b.launch(t0 + 141, t0 + 300, 4)
        return b

    d = built(py(False), py(True, t=12.0))
    assert d.matched_by == "class path"
    first, second = d.find("Net#0/Linear#0"), d.find("Net#0/Linear#1")
    assert first.status is Status.MATCHED and first.delta_us == pytest.approx(3)
    assert second.status is Status.ADDED and second.new_us == pytest.approx(4)


def test_noise_a_change_within_the_step_to_step_spread(built):
    # act's kernel alternates 10 / 30 us between steps in both runs; the new act is 1 us slower
    d = built(model(jitter=20.0), model(act_us=11.0, jitter=20.0, fc_us=(60.0, 60.0)))
    act, fc = d.find("act"), d.find("fc")
    assert act.phase(Pass.FORWARD).spread_us == pytest.approx(14.142, rel=1e-3)
    assert act.noise and act.phase(Pass.FORWARD).noise
    assert not fc.noise
    text = render_diff(d, "tree")
    assert "act (ReLU): 20.0 us -> 21.0 us (+1.0 us +5.0%) ±14.1 us (noise)" in text


def test_one_step_asked_for_is_named_in_the_header_and_the_warning_says_why_no_spread(built):
    d = built(model(steps=(1, 2, 3)), model(steps=(1, 2, 3), fc_us=(50.0,)), step=3)
    assert d.base.steps == (3,) and d.base.complete_steps == (1, 2, 3)
    text = render_diff(d, "tree")
    assert "(Test GPU, step 3 of 3 complete steps, modules" in text
    alone = [w for w in d.warnings if "step-to-step spread" in w]
    assert alone == [
        "step 3 of both traces is compared alone, not the mean of the complete steps: "
        "no step-to-step spread, changes cannot be told from noise"
    ]
    one = built(model(steps=(1,)), model(steps=(1,)))  # a trace of one step: said as before
    assert "(Test GPU, 1 step, modules" in render_diff(one, "tree")
    assert any(w.startswith("the base trace has 1 complete step:") for w in one.warnings)


def test_a_trace_against_itself_is_all_zero_and_exit_0(tmp_path):
    d = traceprof.diff(BASE_SAMPLE, BASE_SAMPLE)
    assert all(p.delta_us == 0 for n in d.nodes for p in n.passes)
    assert all(not n.inside for n in d.nodes)
    assert d.wall_delta_us == 0 and all(v == 0 for _, v in d.where())
    assert all(n.status is Status.MATCHED for n in d.nodes)
    r = CliRunner().invoke(main, ["diff", str(BASE_SAMPLE), str(BASE_SAMPLE), "--fail-if-slower", "0"])
    assert r.exit_code == 0, r.output
    assert "most changed" not in r.output


def test_sample_pair_puts_the_widened_mlp_first():
    d = traceprof.diff(BASE_SAMPLE, WIDE_SAMPLE)
    assert d.matched_by == "qualified name" and not [n for n in d.nodes if n.status is not Status.MATCHED]
    # down the tree, the largest change at each level leads to the widened MLP
    node = d.nodes[d.roots[0]]
    path = []
    while node.children and node.qualified_name != "transformer.h.2.mlp":
        node = d.nodes[node.children[0]]
        path.append(node.qualified_name)
    assert path[-2:] == ["transformer.h.2", "transformer.h.2.mlp"]
    assert set(path[:-2]) <= {"transformer", "transformer.h"}  # containers, levels of the tree
    # the modules whose own time changed most are inside it
    assert all(n.qualified_name.startswith("transformer.h.2.mlp") for n in d.ranked()[:2])
    mlp = d.find("transformer.h.2.mlp")
    assert mlp.delta_ratio > 1.5  # 4x wider: over 2.5x the time
    assert mlp.phase(Pass.FORWARD).new_flops == pytest.approx(
        4 * mlp.phase(Pass.FORWARD).base_flops, rel=0.01
    )
    assert not mlp.noise
    others = [
        n
        for n in d.modules()
        if n.qualified_name.startswith("transformer.h.")
        and n.qualified_name.count(".") == 2
        and n.qualified_name != "transformer.h.2"
    ]
    assert len(others) == 3  # the other blocks, unchanged but for noise
    assert all(abs(n.delta_us) < abs(d.find("transformer.h.2").delta_us) / 3 for n in others)
    df = d.to_dataframe()
    assert len(df) == 3 * len(d.nodes)
    assert df["delta_us"].abs().is_monotonic_decreasing


def test_fail_if_slower_exit_code_on_the_step_and_on_a_module():
    runner = CliRunner()
    r = runner.invoke(
        main,
        [
            "diff",
            str(BASE_SAMPLE),
            str(WIDE_SAMPLE),
            "--fail-if-slower",
            "5",
            "--module",
            "transformer.h.2.mlp",
        ],
    )
    assert r.exit_code == SLOWER_EXIT_CODE == 10
    assert "module transformer.h.2.mlp is" in r.output and "slower" in r.output
    r = runner.invoke(
        main,
        [
            "diff",
            str(WIDE_SAMPLE),
            str(BASE_SAMPLE),
            "--fail-if-slower",
            "5",
            "--module",
            "transformer.h.2.mlp",
        ],
    )
    assert r.exit_code == 0
    r = runner.invoke(
        main, ["diff", str(BASE_SAMPLE), str(WIDE_SAMPLE), "--fail-if-slower", "5", "--module", "no.such"]
    )
    assert r.exit_code == 3 and r.output.count("\n") == 1
    assert "traceprof: error: module 'no.such' is in neither trace" in r.output


def test_different_models_and_a_cpu_only_trace_explain_in_one_line(built, tmp_path):
    other = SAMPLE_TRACES / "lenet5_train_cpu.pt.trace.json.gz"
    d = traceprof.diff(BASE_SAMPLE, other)
    [w] = [w for w in d.warnings if "different models" in w]
    assert "\n" not in w and "0 of" in w
    assert d.wall_delta_us != 0  # the step still compares
    d = built(model(), model(gpu=False, cpu_only_dur=80))
    [w] = [w for w in d.warnings if "no GPU work" in w]
    assert w.startswith("the new trace has no GPU work: comparing CPU time only")
    assert d.metric == "cpu_us"
    fc = d.find("fc")  # CPU time of the scope: 100 us in both
    assert fc.phase(Pass.FORWARD).base_us == pytest.approx(100) and fc.delta_us == 0
    assert fc.inside == ()  # kernels on one side, ops on the other: not compared


def test_formats_by_extension_and_one_row_per_node_and_pass(built, tmp_path):
    built(model(), model(fc_us=(60.0, 60.0)))
    runner = CliRunner()
    for ext in ("json", "csv", "html", "txt"):
        r = runner.invoke(main, ["diff", "base.json", "new.json", "-o", f"out.{ext}"])
        assert r.exit_code == 0, r.output
    doc = json.loads(Path("out.json").read_text())
    assert doc["schema"] == "traceprof.diff/1"
    assert doc["nodes"][0]["key"] == "(Net)"
    csv_lines = Path("out.csv").read_text().splitlines()
    assert csv_lines[0].startswith("key,parent_key,depth,kind,status")
    assert len(csv_lines) - 1 == 3 * len(doc["nodes"])
    assert csv_lines[1].split(",")[0] in ("(Net)", "fc (Linear)")  # largest |Δ| first
    r = runner.invoke(main, ["diff", "base.json", "new.json", "-o", "out.xlsx"])
    assert r.exit_code == 3 and "unknown output extension" in r.output
    r = runner.invoke(main, ["diff", "base.json", "new.json", "-o", "base.json", "-f", "json"])
    assert r.exit_code == 4
    pytest.importorskip("pyarrow")
    r = runner.invoke(main, ["diff", "base.json", "new.json", "-o", "out.parquet"])
    assert r.exit_code == 0, r.output
    import pandas as pd

    df = pd.read_parquet("out.parquet")
    assert len(df) == 3 * len(doc["nodes"]) and df["delta_us"].dtype == "float64"


def test_colors_only_on_a_terminal(built):
    from traceprof.render.diff_terminal import styled

    d = built(model(), model(fc_us=(60.0, 60.0)))
    text = render_diff(d, "tree")
    assert "\x1b[" not in text
    from rich.console import Console

    console = Console(force_terminal=True, color_system="standard", width=200)
    with console.capture() as cap:
        console.print(styled(text), end="")
    colored = cap.get()
    assert "\x1b[31m" in colored  # slower in red


def test_job_directories_are_compared_rank_by_rank(built, tmp_path):
    built(model(), model(fc_us=(60.0, 60.0)))
    for side in ("base", "new"):
        (tmp_path / side).mkdir()
        (tmp_path / f"{side}.json").rename(tmp_path / side / "rank0.pt.trace.json")
    r = CliRunner().invoke(main, ["diff", "base", "new"])
    assert r.exit_code == 0, r.output
    assert "jobs compared rank by rank (1 ranks in common); shown: rank 0" in r.output
    assert "fc (Linear): 30.0 us -> 60.0 us (+30.0 us +100.0%)" in r.output


CASES = {
    "diff_slower_swapped_added": lambda: (
        model(act_name="act"),
        model(fc_us=(45.0, 45.0), fc_kernel="gemm_b", extra="drop"),
    ),
}
EXT = {"tree": "txt", "json": "json", "csv": "csv"}


@pytest.mark.parametrize("fmt", sorted(EXT))
def test_golden(built, fmt, update_golden):
    base, new = CASES["diff_slower_swapped_added"]()
    d = built(base, new)
    out = render_diff(d, fmt)
    golden = GOLDEN / f"diff_slower_swapped_added.{EXT[fmt]}"
    if update_golden or not golden.exists():
        golden.write_text(out)
        if not update_golden:
            pytest.fail(f"{golden.name} was missing and has been written; rerun")
    assert out == golden.read_text(), f"{golden.name} differs (rerun with --update-golden)"


def test_every_diff_renderer_is_covered():
    assert set(DIFF_REGISTRY) == set(EXT) | {"parquet", "html"}


def test_sides_can_be_computed_once_and_compared_many_times():
    base = side_of(BASE_SAMPLE)
    assert compare(base, base).wall_delta_us == 0


def test_tensorboard_run_pair(tmp_path):
    pytest.importorskip("tensorboard")
    logdir = tmp_path / "tb"
    r = CliRunner().invoke(
        main,
        [
            "diff",
            str(BASE_SAMPLE),
            str(WIDE_SAMPLE),
            "-o",
            str(tmp_path / "d.json"),
            "--tensorboard",
            str(logdir),
        ],
    )
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in logdir.iterdir()) == ["base", "new"]
    assert "wrote TensorBoard run base" in r.output and "wrote TensorBoard run new" in r.output


def test_two_job_directories_show_the_rank_that_changed_most(tmp_path):
    from traceprof.testing import generate_job

    generate_job(tmp_path / "a", ranks=2, steps=3, layers=2, quiet=True)
    generate_job(
        tmp_path / "b",
        ranks=2,
        slow_rank=1,
        slow_module="transformer.h.1.mlp.c_fc",
        slow_factor=3.0,
        steps=3,
        layers=2,
        quiet=True,
    )
    d = traceprof.compare.diff.diff_jobs(tmp_path / "a", tmp_path / "b")
    assert "shown: rank 1, the largest step change" in d.warnings[0]
    assert d.ranked()[0].qualified_name == "transformer.h.1.mlp.c_fc"
    assert d.metric == "gpu_busy_us"
    [k] = [i for i in d.find("transformer.h.1.mlp.c_fc").inside if i.phase is Pass.FORWARD]
    assert k.kind == "kernel" and k.status is Status.MATCHED and k.delta_us > 0


def test_per_step_times_agree_with_analyze_steps():
    """The spread comes from per-step node times computed with the diff's side tables; they
    are the numbers traceprof.analyze_steps gives for each step."""
    from traceprof.api import analyze_steps

    trace = traceprof.load_trace(BASE_SAMPLE)
    side = side_of(trace)
    profiles = analyze_steps(trace, list(side.step_numbers))
    assert len(side.step_numbers) == 3
    for name in ("", "transformer.h.2.mlp", "transformer.h.0.attn.c_attn"):
        node = side.profile.find(name)
        for code, phase in enumerate((Pass.FORWARD, Pass.BACKWARD)):
            mine = side.node_steps[(node.path, code)]
            theirs = [getattr(p.find(name).phase(phase).total, side.metric) for p in profiles]
            assert mine == pytest.approx(theirs, rel=1e-9, abs=1e-6)


def test_the_command_offers_every_diff_format():
    from traceprof.cli.choices import DIFF_FORMATS

    assert sorted(DIFF_FORMATS) == sorted(DIFF_REGISTRY)
    r = CliRunner().invoke(main, ["diff", str(BASE_SAMPLE), str(BASE_SAMPLE), "-f", "parquet"])
    assert r.exit_code == 3 and "is binary" in r.output


DLRM = sorted(
    (SAMPLE_TRACES.parent.parent / "shared" / "traces" / "multi_rank").glob(
        "dlrm_v100_8ranks_worker*.pt.trace.json.gz"
    )
)


@pytest.mark.skipif(len(DLRM) < 6, reason="../shared/traces not present")
def test_real_gpu_ranks_where_the_step_went_adds_up_with_collectives():
    d = traceprof.diff(DLRM[0], DLRM[5])
    assert d.metric == "gpu_busy_us" and d.matched_by == "class path"
    where = dict(d.where())
    assert sum(where.values()) == pytest.approx(d.wall_delta_us, abs=0.01)
    assert where["collectives"] > 100  # rank 5 waits longer in its all-to-all
    assert all(n.status is Status.MATCHED for n in d.modules())
    assert [w for w in d.warnings if "1 complete step" in w]  # one step: no spread
    same = traceprof.diff(DLRM[0], DLRM[0])
    assert all(p.delta_us == 0 for n in same.nodes for p in n.passes)
    assert all(v == 0 for v in dict(same.where()).values())


def test_an_unreadable_input_is_one_line_and_exit_2(tmp_path):
    r = CliRunner().invoke(main, ["diff", str(tmp_path / "missing.json"), str(BASE_SAMPLE)])
    assert r.exit_code == 2
    assert r.output == f"traceprof: error: {tmp_path / 'missing.json'}: no such file\n"


def test_compiled_work_outside_every_module_counts_outside_the_modules(tmp_path):
    """A compiled region no module is around becomes a root of kind compiled: its change is
    'outside modules' in the header's where, so that the parts add up to the step's."""
    from .tracebuilder import TraceBuilder

    def trace(gemm_us: float) -> TraceBuilder:
        b = TraceBuilder()
        b.step(1, 0, 1000)
        b.scope("", "Net", 10, 60)
        b.op("aten::relu", 20, 10)
        b.launch(22, 40, 10, name="void relu_kernel")
        b.op("Torch-Compiled Region: 0/0", 100, 300)
        b.op("aten::mm", 140, 50)
        b.launch(150, 230, gemm_us, name="ampere_sgemm_128x64_nn")
        return b

    base, new = trace(40).write(tmp_path / "a.json"), trace(90).write(tmp_path / "b.json")
    d = traceprof.diff(str(base), str(new))
    profile = traceprof.analyze(str(new))
    assert [profile.nodes[r].kind.value for r in profile.roots].count("compiled") == 1
    where = dict(d.where())
    assert where["modules"] == pytest.approx(0.0)
    assert where["outside modules"] == pytest.approx(50.0)
    assert sum(where.values()) == pytest.approx(0.0)  # the step's wall did not change
    out = render_diff(d, "tree")
    assert "no module events" not in out and "modules from" in out


def test_a_side_without_module_events_says_so():
    from .conftest import SHARED_TRACES

    trace = SHARED_TRACES / "compiled/rtx4090d_mlp_graph_breaks_compiled_train.json.gz"
    out = render_diff(traceprof.diff(str(trace), str(trace)), "tree")
    assert "no module events" in out and "modules from none" not in out

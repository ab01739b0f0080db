"""The public API (issue 35): analyze, analyze_job and diff take the same typed keywords for
what they read and how they shape the result, report progress through one callback type, and
everything ``traceprof`` exports (what ``help(traceprof)`` lists) is named in the README."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import traceprof
from traceprof.testing import generate_job

from .conftest import SAMPLE_TRACES

SAMPLE = SAMPLE_TRACES / "lenet5_train_cpu.pt.trace.json.gz"
README = Path(__file__).parents[1] / "README.md"
#: the keywords the three entry points share
SHARED = ("step", "hierarchy", "max_memory", "cache", "depth", "top", "sort", "ignore", "progress")


@pytest.mark.parametrize("entry", [traceprof.analyze, traceprof.analyze_job, traceprof.diff])
def test_the_entry_points_take_the_same_typed_keywords(entry):
    parameters = inspect.signature(entry).parameters
    for name in SHARED:
        assert name in parameters, f"{entry.__name__} has no {name}"
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
    untyped = [n for n, p in parameters.items() if p.annotation is inspect.Parameter.empty]
    assert not untyped, f"{entry.__name__}: {untyped} without a type"
    analyze = inspect.signature(traceprof.analyze).parameters
    for name in SHARED:
        if name != "sort":  # a diff is by change of time, when shaped: None, not "order"
            spelled = [re.sub(r"\w+\.", "", str(p[name].annotation)) for p in (parameters, analyze)]
            assert spelled[0] == spelled[1], (entry.__name__, name, spelled)
            assert parameters[name].default == analyze[name].default, (entry.__name__, name)


def test_analyze_ignores_modules_as_the_command_line_does():
    whole = traceprof.analyze(SAMPLE, cache=False)
    shown = traceprof.analyze(SAMPLE, ignore=["*Conv*"], cache=False)
    assert shown.nodes == traceprof.ignore_modules(whole, ["*Conv*"]).nodes
    assert any(n.class_name == "Conv2d" for n in whole.nodes)
    assert not any(n.class_name == "Conv2d" for n in shown.nodes)


def test_one_progress_callback_type_for_a_trace_and_a_job(tmp_path):
    lines: list[str] = []
    traceprof.analyze(SAMPLE, cache=False, progress=lines.append)
    assert lines[-1] == "attributing"
    generate_job(tmp_path, ranks=2, steps=2, layers=1, quiet=True)
    said: list[str] = []
    traceprof.analyze_job(tmp_path, jobs=1, cache=False, progress=said.append)
    assert len(said) == 2 and all(re.fullmatch(r"analyzed \S+ \([12] of 2\)", s) for s in said), said
    counts: list[tuple[int, int, str]] = []

    def earlier_style(done, total, path):  # what analyze_job called before Progress: still so
        counts.append((done, total, path))

    traceprof.analyze_job(tmp_path, jobs=1, cache=False, progress=earlier_style)
    assert sorted(c[0] for c in counts) == [1, 2] and {c[1] for c in counts} == {2}


def test_every_exported_name_resolves_and_is_in_the_readme():
    readme = README.read_text()
    section = readme[readme.index("## Python API") :]
    section = section[: section.index("\n## ", 1)]
    for name in traceprof.__all__:
        assert getattr(traceprof, name) is not None
        assert f"`{name}`" in section, f"the README's Python API does not name {name}"
    assert "ignore_modules" in traceprof.__all__ and "Progress" in traceprof.__all__
    assert set(dir(traceprof)) >= set(traceprof.__all__)

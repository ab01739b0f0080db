"""The capture session analyzes what it wrote: ``prof.analyze()``, ``prof.report()``, and the
same on the path ``profile_once`` returns (real torch, CPU, tiny models)."""

from __future__ import annotations

import io
import json
import os

import pytest

torch = pytest.importorskip("torch")

import traceprof  # noqa: E402
import traceprof.capture as capture  # noqa: E402
from traceprof.capture.sample_models import LeNet5  # noqa: E402
from traceprof.errors import TraceprofError  # noqa: E402

PARAMETRIZED_LEAVES = ("features.0", "features.3", "classifier.1", "classifier.3", "classifier.5")


def lenet_and_batch() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return LeNet5(), torch.randn(2, 1, 32, 32)


def train_step(model, x, opt) -> None:
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()


def module_names(model) -> set[str]:
    return {name for name, _ in model.named_modules()}


def test_analyze_returns_the_profile_of_the_last_trace_written(tmp_path):
    model, x = lenet_and_batch()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with capture.profile(model, logdir=tmp_path, wait=0, warmup=1, active=1, repeat=2) as prof:
        for _ in range(4):
            train_step(model, x, opt)
            prof.step()
        in_loop = prof.analyze()

    assert len(prof.trace_paths) == 2
    result = prof.analyze()
    assert isinstance(result, traceprof.ModuleProfile)
    assert result.metadata.path == prof.trace_paths[-1] == in_loop.metadata.path
    result.self_check()

    modules = {n.qualified_name: n for n in result.walk() if n.kind is traceprof.NodeKind.MODULE}
    assert set(modules) == module_names(model)
    assert modules[""].class_name == "LeNet5"
    for name in ("", *PARAMETRIZED_LEAVES):
        node = modules[name]
        assert node.forward.total.cpu_us > 0, name
        assert node.backward.total.cpu_us > 0, name
        assert node.forward.total.flops > 0, name


def test_analyze_passes_its_options_to_traceprof_analyze(tmp_path):
    model, x = lenet_and_batch()
    path = capture.profile_once(model, x, backward=True, path=tmp_path / "t.pt.trace.json.gz")
    assert path is not None
    shallow = path.analyze(depth=1)
    assert max(n.depth for n in shallow.walk() if n.kind is traceprof.NodeKind.MODULE) == 1
    with pytest.raises(TypeError):
        path.analyze(no_such_option=1)


def test_report_prints_the_module_tree(tmp_path, capsys):
    model, x = lenet_and_batch()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with capture.profile(model, logdir=tmp_path, wait=0, warmup=1, active=1) as prof:
        for _ in range(2):
            train_step(model, x, opt)
            prof.step()
    capsys.readouterr()

    prof.report()
    full = capsys.readouterr().out
    assert "DeepSpeed Flops Profiler" in full
    for line in ("LeNet5(", "(features): Sequential(", "(0): Conv2d(", "(5): Linear("):
        assert line in full, line

    prof.report(depth=1)
    shallow = capsys.readouterr().out
    assert "(features): Sequential(" in shallow
    assert "Conv2d(" not in shallow and "Linear(" not in shallow


def test_report_writes_to_a_file_instead_of_standard_output(tmp_path, capsys):
    model, x = lenet_and_batch()
    path = capture.profile_once(model, x, backward=True, path=tmp_path / "t.pt.trace.json.gz")
    capsys.readouterr()
    out = io.StringIO()
    path.report(depth=0, raw=True, file=out)
    assert capsys.readouterr().out == ""
    assert "LeNet5(" in out.getvalue() and "Sequential(" not in out.getvalue()


def test_profile_once_returns_its_path_with_the_analysis_one_call_away(tmp_path, capsys):
    model, x = lenet_and_batch()
    target = tmp_path / "once.pt.trace.json.gz"
    path = capture.profile_once(model, x, backward=True, path=target)
    assert isinstance(path, capture.CapturedTrace) and isinstance(path, str)
    assert path == str(target)
    assert traceprof.analyze(path).metadata.path == path.analyze().metadata.path == str(target)
    capsys.readouterr()
    path.report(depth=1)
    assert "(classifier): Sequential(" in capsys.readouterr().out


def one_line(error: pytest.ExceptionInfo[TraceprofError]) -> str:
    message = str(error.value)
    assert "\n" not in message and message == error.value.message
    return message


def test_analyze_before_the_session_starts_is_an_error(tmp_path):
    model, _ = lenet_and_batch()
    prof = capture.profile(model, logdir=tmp_path)
    with pytest.raises(TraceprofError, match="has not started") as error:
        prof.analyze()
    one_line(error)


def test_analyze_before_the_active_steps_end_is_an_error(tmp_path):
    model, x = lenet_and_batch()
    with capture.profile(model, logdir=tmp_path, wait=1, warmup=1, active=2) as prof:
        for done in range(1, 4):
            model(x)
            prof.step()
            with pytest.raises(TraceprofError, match=f"at step\\(\\) call 4; {done} so far") as error:
                prof.report()
            one_line(error)
        model(x)
        prof.step()
        assert prof.analyze().module_nodes == len(module_names(model))


def test_a_session_that_ends_in_its_warmup_has_no_trace(tmp_path):
    model, x = lenet_and_batch()
    with capture.profile(model, logdir=tmp_path, wait=1, warmup=1, active=1) as prof:
        model(x)
        prof.step()
    assert prof.trace_paths == []
    with pytest.raises(TraceprofError, match="ended before its active steps") as error:
        prof.analyze()
    one_line(error)


def test_a_rank_that_does_not_profile_has_no_trace(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    model, x = lenet_and_batch()
    with capture.profile(model, logdir=tmp_path, wait=0, warmup=0, active=1, ranks=[0]) as prof:
        model(x)
        prof.step()
    with pytest.raises(TraceprofError, match=r"rank 1 does not profile \(ranks=\[0\]\)") as error:
        prof.report()
    one_line(error)


def test_a_trace_path_through_a_missing_directory_and_dot_dot_is_written(tmp_path):
    """``logdir="<tmp>/x/../../dd"`` with ``x`` missing: the temporary file went to the
    normalized path and the rename to the raw one (FileNotFoundError)."""
    from traceprof.capture.session import write_trace

    class Exporter:
        def export_chrome_trace(self, path):
            with open(path, "w", encoding="utf-8") as f:
                f.write(json.dumps({"traceEvents": [], "traceName": path}))

    target = os.path.join(str(tmp_path), "x", "..", "dd", "t.pt.trace.json")
    written = write_trace(Exporter(), target)
    assert written == os.path.join(str(tmp_path), "dd", "t.pt.trace.json")
    assert os.path.exists(written) and os.listdir(tmp_path / "dd") == ["t.pt.trace.json"]


def test_no_trace_yet_is_an_option_error():
    from traceprof.errors import OptionError

    prof = capture.profile(torch.nn.Linear(2, 2))
    with pytest.raises(OptionError, match="has not started") as error:
        prof.analyze()
    assert error.value.exit_code == OptionError.exit_code

"""traceprof.integrations.lightning with a real PyTorch Lightning Trainer on CPU: a tiny
LightningModule trained a few steps with the callback, a CSV logger in tmp_path."""

from __future__ import annotations

import csv
import logging
import os
import re

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.loggers import CSVLogger  # noqa: E402

import traceprof  # noqa: E402
from traceprof.errors import OptionError  # noqa: E402
from traceprof.integrations.lightning import TraceprofCallback  # noqa: E402

LOGGER = "traceprof.integrations.lightning"


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))
        self.head = torch.nn.Linear(32, 1)

    def forward(self, x):
        return self.head(self.encoder(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def loader():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 16, generator=generator)
    data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
    return torch.utils.data.DataLoader(data, batch_size=4)


class AdamWRegressor(Regressor):
    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


def fit(tmp_path, callback, max_steps: int, accumulation: int = 1, logger=None, model_class=Regressor):
    torch.manual_seed(0)
    model = model_class()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=max_steps,
        accumulate_grad_batches=accumulation,
        logger=logger if logger is not None else CSVLogger(str(tmp_path), name="logs"),
        callbacks=[callback],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=50,  # the callback's metrics must not depend on it
        default_root_dir=str(tmp_path),
    )
    trainer.fit(model, loader())
    return trainer, model


def test_fit_window_is_traced_analyzed_and_logged(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    callback = TraceprofCallback(wait=1, warmup=1, active=2, top=2)
    trainer, model = fit(tmp_path, callback, max_steps=6, accumulation=2)

    # one trace, in the logger's version directory
    log_dir = os.path.join(str(tmp_path), "logs", "version_0")
    assert trainer.log_dir == log_dir and callback.logdir == log_dir
    assert len(callback.trace_paths) == 1
    path = callback.trace_paths[0]
    assert os.path.isfile(path) and os.path.dirname(path) == log_dir

    # the session ended with its last cycle: no hook is left on the module
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())

    # the trace, analyzed on its own, has the module's qualified names, forward and backward time
    result = traceprof.analyze(path)
    result.self_check()
    assert result.source == "traceprof"
    assert result.selection.numbers == (2, 3)
    for name, class_name in (("encoder.0", "Linear"), ("encoder", "Sequential"), ("head", "Linear")):
        node = result.find(name)
        assert node.class_name == class_name
        assert node.forward.total.cpu_us > 0, name
        assert node.backward.total.cpu_us > 0, name
    assert result.find("encoder.0").calls == 2  # two batches per optimizer step, one prof.step()
    assert result.find("").class_name == "Regressor"

    headline = callback.headline
    assert headline is not None and callback.profile is not None
    assert headline.steps == (3, 4)  # Lightning's global steps
    assert headline.step_time_us == pytest.approx(result.selection.wall_us)
    assert len(headline.top_modules) == 2 and headline.top_modules[0].own_us > 0

    # logged: one line on the logger, the metrics in the CSV logger's file at the global step
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    summary = [line for line in lines if line.startswith("traceprof: steps 3-4:")]
    assert len(summary) == 1, lines
    assert "top modules by own CPU time: " + headline.top_modules[0].name in summary[0]
    with open(os.path.join(log_dir, "metrics.csv"), newline="") as f:
        rows = [row for row in csv.DictReader(f) if row.get("traceprof/step_time_ms")]
    assert len(rows) == 1
    assert int(rows[0]["step"]) == 4
    assert float(rows[0]["traceprof/step_time_ms"]) == pytest.approx(headline.step_time_us / 1000)
    assert float(rows[0]["traceprof/cpu_ms"]) == pytest.approx(headline.cpu_us / 1000)


def test_the_optimizer_closure_is_not_counted_as_forward(tmp_path):
    """Lightning runs training_step and the backward inside optimizer.step(closure): the
    forward is the modules' and the loss's, the step the optimizer's own update."""
    from click.testing import CliRunner

    from traceprof.cli import main
    from traceprof.render.tree import summarize

    callback = TraceprofCallback(wait=1, warmup=1, active=2)
    fit(tmp_path, callback, max_steps=5, model_class=AdamWRegressor)
    result = callback.profile
    result.self_check()
    s = summarize(result)
    optimizer = next(n for n in result.nodes if n.name == "Optimizer.step#AdamW.step")
    assert optimizer.forward.total.cpu_us == 0 and optimizer.backward.total.cpu_us == 0
    assert s.step_us == pytest.approx(optimizer.other.total.cpu_us) and s.step_us > 0
    # outside the modules, forward work is the loss: below the modules' forward, not 3.7 times it
    assert 0 < s.outside_fwd_us < s.modules_fwd_us
    assert s.fwd_us == pytest.approx(s.modules_fwd_us + s.outside_fwd_us)
    # the optimizer's ops are its update, none of them forward
    r = CliRunner().invoke(main, ["analyze", callback.trace_paths[0], "--ops", "Optimizer.step#AdamW.step"])
    assert r.exit_code == 0, r.output
    rows = [line.split() for line in r.stdout.splitlines() if " op " in line]
    assert rows and {row[0] for row in rows} == {"other"}, r.stdout
    assert "aten::lerp_" in {row[2] for row in rows} and "aten::mse_loss" not in r.stdout
    # the headline lists modules as modules, the optimizer's step and data loading apart
    headline = callback.headline
    table = result.metadata.module_table.modules
    assert headline.top_modules and all(
        m.name in table or m.name == "AdamWRegressor" for m in headline.top_modules
    )
    outside = [m.name for m in headline.top_outside]
    assert "Optimizer.step#AdamW.step" in outside and not {m.name for m in headline.top_modules} & set(
        outside
    )
    message = headline.message()
    assert "; outside the modules: " in message
    assert "Optimizer.step#AdamW.step" in message.split("; outside the modules: ")[1]
    assert "Optimizer.step" not in message.split("; outside the modules: ")[0]


class Parts(L.LightningModule):
    """training_step calls the submodules, never forward."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU())
        self.norm = torch.nn.LayerNorm(32)
        self.head = torch.nn.Linear(32, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.head(self.norm(self.encoder(x))), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_the_model_is_the_root_when_its_forward_is_not_called(tmp_path):
    """The submodules hang under the LightningModule, by their names: ``head`` and ``norm``
    are told apart, not two roots ``Linear(`` and ``LayerNorm(``."""
    from traceprof.render import render

    callback = TraceprofCallback(wait=1, warmup=1, active=2)
    fit(tmp_path, callback, max_steps=5, model_class=Parts)
    result = callback.profile
    result.self_check()
    modules = [n for n in result.nodes if n.kind is traceprof.NodeKind.MODULE]
    root = result.find("")
    assert [result.nodes[r].qualified_name for r in result.roots[:-1]] == [""]
    assert root.class_name == "Parts" and root.calls == 0  # never called itself
    assert [result.nodes[c].qualified_name for c in root.children] == ["encoder", "norm", "head"]
    assert root.forward.total.cpu_us == pytest.approx(
        sum(result.nodes[c].forward.total.cpu_us for c in root.children)
    )
    assert len(modules) == result.module_nodes == 6
    tree = render(result, "tree")
    assert "\nParts(\n" in tree and "(head): Linear(" in tree and "(norm): LayerNorm(" in tree
    table = render(result, "table")
    assert re.search(r"^Parts ", table, re.M) and "LayerNorm: 1-2" in table


def test_repeated_cycles_each_analyzed(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    callback = TraceprofCallback(wait=0, warmup=1, active=1, repeat=2, logdir=tmp_path / "traces")
    fit(tmp_path, callback, max_steps=6)
    assert callback.logdir == str(tmp_path / "traces")
    assert len(callback.trace_paths) == 2 and len(callback.profiles) == 2
    assert [h.steps for h in callback.headlines] == [(2,), (4,)]
    assert all(os.path.dirname(p) == str(tmp_path / "traces") for p in callback.trace_paths)


def test_training_shorter_than_the_window_warns(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    callback = TraceprofCallback(wait=3, warmup=1, active=1)
    _, model = fit(tmp_path, callback, max_steps=2)
    assert callback.trace_paths == [] and callback.metrics == {}
    warnings = [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert any("no trace was written: training ended after 2 step(s)" in w for w in warnings), warnings
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())


def test_an_exception_in_training_removes_the_hooks(tmp_path):
    class Failing(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 2:
                raise RuntimeError("stop here")

    callback = TraceprofCallback(wait=0, warmup=1, active=3)
    torch.manual_seed(0)
    model = Regressor()
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=6,
        logger=False,
        callbacks=[callback, Failing()],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )
    with pytest.raises(RuntimeError, match="stop here"):
        trainer.fit(model, loader())
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())
    assert len(callback.trace_paths) == 1  # the active steps recorded so far are written
    assert os.path.dirname(callback.trace_paths[0]) == str(tmp_path)


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(OptionError, match=r"^warmup must be an integer >= 0, got 'x'$"):
        TraceprofCallback(warmup="x")
    with pytest.raises(OptionError, match=r"^logdir must be a path, got 3$"):
        TraceprofCallback(logdir=3)


def doc_example(module: str) -> str:
    """The Python example of docs/capture.md that imports from ``module``."""
    doc = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "capture.md")
    with open(doc, encoding="utf-8") as f:
        blocks = [
            b for b in re.findall(r"```python\n(.*?)```", f.read(), re.S) if f"from {module} import" in b
        ]
    assert len(blocks) == 1, f"docs/capture.md should have one example of {module}"
    return blocks[0]


def test_the_doc_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    traceprof_logger = logging.getLogger("traceprof")
    monkeypatch.setattr(traceprof_logger, "level", traceprof_logger.level)  # the example sets it
    namespace: dict = {}
    exec(compile(doc_example("traceprof.integrations.lightning"), "docs/capture.md", "exec"), namespace)
    callback = namespace["callback"]
    (path,) = callback.trace_paths
    assert os.path.dirname(path) == os.path.join(str(tmp_path), "lightning_logs", "version_0")
    assert callback.headline is not None and callback.headline.steps == (3, 4, 5)
    assert callback.profile.find("encoder.0").backward.total.cpu_us > 0
    assert callback.metrics["traceprof/step_time_ms"] > 0

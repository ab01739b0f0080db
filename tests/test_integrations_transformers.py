"""traceprof.integrations.transformers with a real Hugging Face Trainer on CPU: a tiny GPT-2 built
from its config (nothing downloaded), trained a few steps with the callback."""

from __future__ import annotations

import logging
import os
import re

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import traceprof  # noqa: E402
from traceprof.errors import OptionError  # noqa: E402
from traceprof.integrations.transformers import TraceprofCallback  # noqa: E402

LOGGER = "traceprof.integrations.transformers"


class TokenData(torch.utils.data.Dataset):
    """Random token sequences, each its own labels (causal LM)."""

    def __init__(self, n: int = 64, length: int = 16, vocab: int = 100) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def tiny_gpt2():
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


def train(tmp_path, callback, max_steps: int, accumulation: int = 1):
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        max_steps=max_steps,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=accumulation,
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = transformers.Trainer(
        model=tiny_gpt2(), args=args, train_dataset=TokenData(), callbacks=[callback]
    )
    trainer.train()
    return trainer


def test_trainer_window_is_traced_analyzed_and_logged(tmp_path, caplog, monkeypatch):
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    caplog.set_level(logging.INFO, logger=LOGGER)
    callback = TraceprofCallback(wait=1, warmup=1, active=2, top=3)
    trainer = train(tmp_path, callback, max_steps=6, accumulation=2)

    # one trace, in the Trainer's logging directory (<output_dir>/runs/<time>_<host>)
    assert len(callback.trace_paths) == 1
    path = callback.trace_paths[0]
    assert os.path.isfile(path) and path.endswith(".pt.trace.json.gz")
    assert os.path.dirname(path) == callback.logdir
    runs = os.path.join(str(tmp_path / "out"), "runs")
    assert os.path.dirname(callback.logdir) == runs

    # the session ended with its last cycle: no hook is left on the model
    model = trainer.model
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())

    # the trace, analyzed on its own, has the model's qualified names, forward and backward time
    result = traceprof.analyze(path)
    result.self_check()
    assert result.selection.numbers == (2, 3)  # ProfilerStep#2, #3: the two active steps
    attn = result.find("transformer.h.0.attn")
    assert attn.class_name.startswith("GPT2") and "Attention" in attn.class_name
    assert attn.forward.total.cpu_us > 0
    assert attn.backward.total.cpu_us > 0
    assert attn.calls == 2  # two micro-batches per optimizer step: prof.step() once per step
    assert result.find("lm_head").backward.total.cpu_us > 0

    # the numbers the callback keeps are the trace's
    headline = callback.headline
    assert headline is not None and callback.profile is not None
    assert headline.steps == (3, 4)  # the Trainer's global steps
    assert headline.gpu_busy_us is None and headline.time_kind == "CPU"
    assert headline.step_time_us == pytest.approx(result.selection.wall_us)
    assert headline.flops > 0 and headline.flop_per_s is not None and headline.flop_per_s > 0
    assert headline.mfu is None  # no peak known on a CPU
    assert len(headline.top_modules) == 3
    shares = [m.own_us for m in headline.top_modules]
    assert shares == sorted(shares, reverse=True) and shares[0] > 0
    names = {n.qualified_name or n.class_name for n in result.nodes}
    assert all(m.name in names for m in headline.top_modules)

    # logged: one line on the logger, one entry of the Trainer's log history
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    summary = [line for line in lines if line.startswith("traceprof: steps 3-4:")]
    assert len(summary) == 1, lines
    assert "top modules by own CPU time: " + headline.top_modules[0].name in summary[0]
    assert path in summary[0]
    entries = [e for e in trainer.state.log_history if "traceprof/step_time_ms" in e]
    assert len(entries) == 1
    assert entries[0]["step"] == 4
    assert entries[0]["traceprof/step_time_ms"] == pytest.approx(headline.step_time_us / 1000)
    assert entries[0] == {**callback.metrics, "step": 4}


def test_training_shorter_than_the_window_warns(tmp_path, caplog, monkeypatch):
    log_dir = tmp_path / "tb"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(log_dir))
    caplog.set_level(logging.INFO, logger=LOGGER)
    callback = TraceprofCallback(wait=2, warmup=1, active=2)
    trainer = train(tmp_path, callback, max_steps=2)
    assert callback.logdir == str(log_dir)
    assert callback.trace_paths == [] and callback.profile is None and callback.metrics == {}
    warnings = [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert any("no trace was written: training ended after 2 step(s)" in w for w in warnings), warnings
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in trainer.model.modules())


def test_other_ranks_profile_nothing(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    callback = TraceprofCallback(wait=0, warmup=1, active=1, ranks=[1], logdir=tmp_path / "traces")
    train(tmp_path, callback, max_steps=3)
    assert callback.trace_paths == [] and callback.logdir is None
    assert not (tmp_path / "traces").exists()
    assert not [r for r in caplog.records if r.name == LOGGER]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"active": 0}, "active must be an integer >= 1, got 0"),
        ({"wait": -1}, "wait must be an integer >= 0, got -1"),
        ({"repeat": 1.5}, "repeat must be an integer >= 0, got 1.5"),
        ({"ranks": "0"}, "ranks must be a list of rank numbers, got '0'"),
        ({"ranks": []}, "ranks is empty"),
        ({"ranks": [0, -1]}, "ranks must be a list of rank numbers (integers >= 0), got [0, -1]"),
        ({"peak_tflops": 0}, "peak_tflops must be a number above 0, got 0"),
        ({"top": True}, "top must be an integer >= 0, got True"),
        ({"with_stack": "yes"}, "with_stack must be True or False, got 'yes'"),
    ],
)
def test_bad_arguments_are_one_line_errors(kwargs, message):
    with pytest.raises(OptionError) as info:
        TraceprofCallback(**kwargs)
    assert info.value.message.startswith(message)
    assert "\n" not in info.value.message


def doc_example(module: str) -> str:
    """The Python example of docs/capture.md that imports from ``module``."""
    doc = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "capture.md")
    with open(doc, encoding="utf-8") as f:
        blocks = [
            b for b in re.findall(r"```python\n(.*?)```", f.read(), re.S) if f"from {module} import" in b
        ]
    assert len(blocks) == 1, f"docs/capture.md should have one example of {module}"
    return blocks[0]


def test_the_doc_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    traceprof_logger = logging.getLogger("traceprof")
    monkeypatch.setattr(traceprof_logger, "level", traceprof_logger.level)  # the example sets it
    namespace: dict = {}
    exec(compile(doc_example("traceprof.integrations.transformers"), "docs/capture.md", "exec"), namespace)
    callback, trainer = namespace["callback"], namespace["trainer"]
    (path,) = callback.trace_paths
    assert re.fullmatch(r"out/runs/[A-Z][a-z]{2}\d\d_\d\d-\d\d-\d\d_[^/]+/[^/]+\.pt\.trace\.json\.gz", path)
    assert callback.headline is not None and callback.headline.steps == (3, 4, 5)
    assert callback.profile.find("transformer.h.0.attn").backward.total.cpu_us > 0
    assert (
        trainer.state.log_history[-1]["traceprof/step_time_ms"] == callback.metrics["traceprof/step_time_ms"]
    )

"""Profiling never breaks training (issue 33, item 5), with a real Hugging Face Trainer and a real
PyTorch Lightning run on CPU: a log directory where nothing can be written is found before the
window opens (one warning, training goes on, no hook left); a trace that cannot be written
closes the window; a model that raises inside the window leaves neither hooks nor a running
profiler behind."""

from __future__ import annotations

import logging
import os
import shutil

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
L = pytest.importorskip("lightning.pytorch")
pytest.importorskip("accelerate")

from traceprof.integrations import lightning as tp_lightning  # noqa: E402
from traceprof.integrations import transformers as tp_transformers  # noqa: E402

from .test_integrations_lightning import fit  # noqa: E402
from .test_integrations_transformers import TokenData, tiny_gpt2  # noqa: E402

HF_LOGGER = "traceprof.integrations.transformers"
PL_LOGGER = "traceprof.integrations.lightning"


def hooks_left(model) -> int:
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())


def profiler_on() -> bool:
    return bool(torch.autograd.profiler._is_profiler_enabled)


def bad_logdirs(tmp_path) -> dict[str, str]:
    (tmp_path / "a_file").write_text("x")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    return {
        "a file": str(tmp_path / "a_file"),
        "under a file": str(tmp_path / "a_file" / "runs"),
        "a dangling link": str(tmp_path / "dangling"),
        "/dev/null": os.devnull,
    }


def warnings_of(caplog, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno >= logging.WARNING]


def trainer_args(tmp_path, max_steps: int):
    return transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        max_steps=max_steps,
        per_device_train_batch_size=2,
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def hf_train(tmp_path, callbacks, max_steps: int = 5, model=None):
    model = model if model is not None else tiny_gpt2()
    trainer = transformers.Trainer(
        model=model, args=trainer_args(tmp_path, max_steps), train_dataset=TokenData(), callbacks=callbacks
    )
    trainer.train()
    return trainer


# ---- a log directory where nothing can be written -------------------------------------------------


def test_hf_a_bad_logdir_is_one_warning_and_training_goes_on(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=HF_LOGGER)
    for what, logdir in bad_logdirs(tmp_path).items():
        caplog.clear()
        callback = tp_transformers.TraceprofCallback(wait=1, warmup=1, active=2, logdir=logdir)
        trainer = hf_train(tmp_path, [callback])  # before: an OSError after the window
        assert trainer.state.global_step == 5, what
        said = warnings_of(caplog, HF_LOGGER)
        assert len(said) == 1 and said[0].startswith(
            f"traceprof: not profiling: the log directory {logdir}"
        ), (
            what,
            said,
        )
        assert said[0].endswith("; training goes on")
        assert callback.trace_paths == [] and hooks_left(trainer.model) == 0 and not profiler_on()


def test_hf_a_logdir_through_a_missing_directory_and_dot_dot(tmp_path):
    logdir = str(tmp_path / "a" / "missing" / ".." / ".." / "runs")  # before: FileNotFoundError at the rename
    callback = tp_transformers.TraceprofCallback(wait=1, warmup=1, active=1, logdir=logdir, analyze=False)
    hf_train(tmp_path, [callback], max_steps=3)
    assert len(callback.trace_paths) == 1
    assert os.path.dirname(callback.trace_paths[0]) == str(tmp_path / "runs") == callback.logdir


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_hf_a_read_only_logdir(tmp_path, caplog):
    logdir = tmp_path / "ro"
    logdir.mkdir(mode=0o500)
    callback = tp_transformers.TraceprofCallback(wait=1, warmup=1, active=1, logdir=str(logdir))
    trainer = hf_train(tmp_path, [callback], max_steps=3)
    assert trainer.state.global_step == 3 and callback.trace_paths == []
    assert "Permission denied" in warnings_of(caplog, HF_LOGGER)[0]


def test_lightning_a_bad_logdir_is_one_warning_and_training_goes_on(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=PL_LOGGER)
    for what, logdir in bad_logdirs(tmp_path).items():
        caplog.clear()
        callback = tp_lightning.TraceprofCallback(wait=1, warmup=1, active=2, logdir=logdir)
        trainer, model = fit(tmp_path, callback, max_steps=5)  # before: an OSError after the window
        assert trainer.global_step == 5, what
        said = warnings_of(caplog, PL_LOGGER)
        assert len(said) == 1 and said[0].startswith(
            f"traceprof: not profiling: the log directory {logdir}"
        ), (
            what,
            said,
        )
        assert callback.trace_paths == [] and hooks_left(model) == 0 and not profiler_on()


# ---- a trace that cannot be written closes the window ---------------------------------------------


class _BreakLogdir(transformers.TrainerCallback):
    """Makes the window's log directory a file before the trace is written (a disk gone)."""

    def __init__(self, window) -> None:
        self.window = window

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == 2 and self.window.logdir and os.path.isdir(self.window.logdir):
            shutil.rmtree(self.window.logdir)
            with open(self.window.logdir, "w") as f:
                f.write("in the way")


def test_hf_a_trace_that_cannot_be_written_closes_the_window(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=HF_LOGGER)
    callback = tp_transformers.TraceprofCallback(wait=1, warmup=1, active=1, logdir=str(tmp_path / "tb"))
    trainer = hf_train(tmp_path, [_BreakLogdir(callback), callback])  # before: OSError, 6 hooks left
    assert trainer.state.global_step == 5
    said = warnings_of(caplog, HF_LOGGER)
    assert len(said) == 1 and said[0].startswith("traceprof: profiling stopped: writing its trace failed"), (
        said
    )
    assert hooks_left(trainer.model) == 0 and not profiler_on()


def test_lightning_a_trace_that_cannot_be_written_closes_the_window(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=PL_LOGGER)
    logdir = tmp_path / "tb"

    class Break(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.global_step == 2 and logdir.is_dir():
                shutil.rmtree(logdir)
                logdir.write_text("in the way")

    callback = tp_lightning.TraceprofCallback(wait=1, warmup=1, active=1, logdir=str(logdir))
    torch.manual_seed(0)
    from .test_integrations_lightning import Regressor, loader

    model = Regressor()
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=5,
        logger=False,
        callbacks=[Break(), callback],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )
    trainer.fit(model, loader())
    assert trainer.global_step == 5
    said = warnings_of(caplog, PL_LOGGER)
    assert len(said) == 1 and said[0].startswith("traceprof: profiling stopped: writing its trace failed"), (
        said
    )
    assert hooks_left(model) == 0 and not profiler_on()


# ---- the model raises inside the window --------------------------------------------------------------


class Failing(transformers.GPT2LMHeadModel):
    """A tiny GPT-2 whose forward raises while ``fail`` is set."""

    fail = False

    def forward(self, input_ids=None, labels=None, **kwargs):
        if self.fail:
            raise ValueError("bad batch")
        return super().forward(input_ids=input_ids, labels=labels, **kwargs)


class _FailAt(transformers.TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        model.fail = state.global_step == self.step


def test_hf_a_model_that_raises_in_the_window_leaves_no_hook_and_no_profiler(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=HF_LOGGER)
    torch.manual_seed(0)
    model = Failing(tiny_gpt2().config)
    callback = tp_transformers.TraceprofCallback(wait=1, warmup=1, active=3, logdir=str(tmp_path / "tb"))
    with pytest.raises(ValueError, match="bad batch"):
        hf_train(tmp_path, [_FailAt(3), callback], max_steps=8, model=model)
    # the user goes on with the model (evaluation, another loop): its first call closes the window
    model.fail = False
    with torch.no_grad():
        model(torch.zeros(1, 4, dtype=torch.long))
    assert hooks_left(model) == 0 and not profiler_on()  # before: hooks on, profiler on (2.3x slower)
    said = warnings_of(caplog, HF_LOGGER)
    assert len(said) == 1 and said[0].startswith("traceprof: profiling stopped: the model raised"), said
    assert "bad batch" in said[0]
    # and the next training profiles again, from a closed window
    model.fail = False
    hf_train(tmp_path, [callback], max_steps=4, model=model)
    assert hooks_left(model) == 0 and not profiler_on() and callback.trace_paths


def test_hf_a_new_training_after_a_failed_one_starts_from_a_closed_window(tmp_path):
    torch.manual_seed(0)
    model = Failing(tiny_gpt2().config)
    callback = tp_transformers.TraceprofCallback(
        wait=0, warmup=0, active=5, analyze=False, logdir=str(tmp_path)
    )
    with pytest.raises(ValueError):
        hf_train(tmp_path, [_FailAt(2), callback], max_steps=8, model=model)
    model.fail = False
    hf_train(tmp_path, [callback], max_steps=6, model=model)
    assert hooks_left(model) == 0 and not profiler_on()

"""Profile a window of Hugging Face ``Trainer`` steps with traceprof's capture session.

::

    from traceprof.integrations.transformers import TraceprofCallback

    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[TraceprofCallback(active=3)])
    trainer.train()

Needs the ``transformers`` extra (torch, transformers, accelerate); docs/capture.md.
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import datetime
from typing import Any

from traceprof.errors import MissingDependencyError
from traceprof.integrations.window import Headline, WindowResults

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ImportError as e:
    raise MissingDependencyError(
        f"traceprof.integrations.transformers needs transformers ({e}): pip install 'traceprof[transformers]'"
    ) from None

__all__ = ["TraceprofCallback", "trainer_logdir"]

logger = logging.getLogger(__name__)


class TraceprofCallback(WindowResults, TrainerCallback):
    """Capture steps ``wait + warmup + 1`` to ``wait + warmup + active`` of training (``repeat``
    such cycles; 0: until training ends) with :class:`traceprof.capture.profile`, on the ranks in
    ``ranks`` (None: every rank).

    The traces go into ``logdir``, by default the Trainer's logging directory (see
    :func:`trainer_logdir`). Each is analyzed when it is written (``analyze=False``: not) and its
    headline numbers (step time, GPU busy and CPU time, FLOP/s, MFU when the device's peak is known
    or ``peak_tflops`` is given, the ``top`` modules by own time) are logged on the
    ``traceprof.integrations.transformers`` logger at INFO and appended to ``state.log_history``
    (``traceprof/...`` keys, so ``trainer_state.json`` keeps them). They stay on the callback:
    ``trace_paths``, ``profiles`` (the :class:`~traceprof.ModuleProfile` of each trace),
    ``headlines``, and ``profile`` / ``headline`` / ``metrics`` for the last trace.

    The model profiled is the one the Trainer passes to its callbacks (the model before
    DDP/accelerate wrapping, so module names are the model's own); ``prof.step()`` is called at
    each ``on_step_end``, once per optimizer step (after gradient accumulation).
    """

    _log = logger

    # -- Trainer hooks ----------------------------------------------------------------------------

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        model = kwargs.get("model")
        if model is None:
            logger.warning("traceprof: the Trainer passed no model to its callbacks; nothing is profiled")
            return
        logdir = self.options.logdir or trainer_logdir(args, state)
        self._window.open(unwrapped(model), logdir, first_step=state.global_step)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._keep(state, self._window.step())

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._keep(state, self._window.close())

    def _keep(self, state: TrainerState, headlines: list[Headline]) -> None:
        for line in headlines:
            state.log_history.append({**line.metrics(), "step": state.global_step})


def trainer_logdir(args: TrainingArguments, state: TrainerState) -> str:
    """The Trainer's logging directory, where its TensorBoard callback writes.

    ``args.logging_dir`` where the arguments have one (transformers 4), else as transformers 5's
    ``TensorBoardCallback`` picks it: ``$TENSORBOARD_LOGGING_DIR``, else
    ``<output_dir>/runs/<Mon DD_HH-MM-SS>_<host>`` (with the trial's name under a hyperparameter
    search).
    """
    logging_dir = getattr(args, "logging_dir", None)
    if logging_dir:
        return os.fspath(logging_dir)
    from_env = os.environ.get("TENSORBOARD_LOGGING_DIR")
    if from_env:
        return os.path.expanduser(from_env)
    run = datetime.now().strftime("%b%d_%H-%M-%S") + "_" + socket.gethostname()
    path = os.path.join(args.output_dir or ".", "runs", run)
    if state.is_hyper_param_search and state.trial_name is not None:
        path = os.path.join(path, state.trial_name)
    return path


def unwrapped(model: Any) -> Any:
    """``model`` without DDP / DataParallel wrappers (``torch.compile`` wrappers stay: the capture
    session names their modules as the original model's)."""
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    while isinstance(model, (DataParallel, DistributedDataParallel)):
        model = model.module
    return model

"""Profile a window of PyTorch Lightning training steps with traceprof's capture session.

::

    from traceprof.integrations.lightning import TraceprofCallback

    trainer = L.Trainer(max_steps=100, callbacks=[TraceprofCallback(active=3)])
    trainer.fit(model, data)

A ``Callback`` rather than a ``Profiler``: a Trainer has one profiler, and this one composes with
whichever the user has (``profiler="simple"``), where a ``Profiler`` subclass would replace it and
would have to tell optimizer steps from the names of the actions it is asked to time. Needs the
``lightning`` extra (torch, lightning); docs/capture.md.
"""

from __future__ import annotations

import logging
from typing import Any

from traceprof.errors import MissingDependencyError
from traceprof.integrations.window import Headline, WindowResults

try:
    from lightning.pytorch import Callback, LightningModule, Trainer
except ImportError as e:
    raise MissingDependencyError(
        f"traceprof.integrations.lightning needs lightning ({e}): pip install 'traceprof[lightning]'"
    ) from None

__all__ = ["TraceprofCallback"]

logger = logging.getLogger(__name__)


class TraceprofCallback(WindowResults, Callback):
    """Capture steps ``wait + warmup + 1`` to ``wait + warmup + active`` of training (``repeat``
    such cycles; 0: until training ends) with :class:`traceprof.capture.profile`, on the ranks in
    ``ranks`` (None: every rank).

    The traces go into ``logdir``, by default ``trainer.log_dir`` (the logger's version directory,
    ``lightning_logs/version_N`` by default; ``default_root_dir`` without a logger). Each is
    analyzed when it is written (``analyze=False``: not) and its headline numbers (step time, GPU
    busy and CPU time, FLOP/s, MFU when the device's peak is known or ``peak_tflops`` is given, the
    ``top`` modules by own time) are logged on the ``traceprof.integrations.lightning`` logger at
    INFO and sent to every logger of the Trainer (``traceprof/...`` metrics at the global step;
    Lightning's loggers keep rank 0's). They stay on the callback: ``trace_paths``, ``profiles``
    (the :class:`~traceprof.ModuleProfile` of each trace), ``headlines``, and ``profile`` /
    ``headline`` / ``metrics`` for the last trace.

    The model profiled is the ``LightningModule``: module names are its attribute paths
    (``model.encoder.layer.0``). ``prof.step()`` is called when ``trainer.global_step`` moved
    since the last training batch, once per optimizer step (after gradient accumulation).
    """

    _log = logger
    #: trainer.global_step at the last training batch
    _last_global_step = 0

    # -- Trainer hooks ----------------------------------------------------------------------------

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # trainer.log_dir is a collective call: every rank asks, whether it profiles or not
        logdir = self.options.logdir or trainer.log_dir or trainer.default_root_dir
        self._last_global_step = trainer.global_step
        self._window.open(pl_module, logdir, first_step=trainer.global_step)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_step == self._last_global_step:  # a batch that accumulated gradients
            return
        self._last_global_step = trainer.global_step
        self._send(trainer, self._window.step())

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._send(trainer, self._window.close())

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._window.close(analyze=False)  # hooks off, the profiler stopped; the trace kept

    def _send(self, trainer: Trainer, headlines: list[Headline]) -> None:
        for line in headlines:
            for lightning_logger in trainer.loggers:
                lightning_logger.log_metrics(line.metrics(), step=trainer.global_step)

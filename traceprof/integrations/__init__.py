"""Callbacks that profile a window of training steps from inside a framework's trainer.

- ``traceprof.integrations.transformers.TraceprofCallback``: the Hugging Face ``Trainer``;
- ``traceprof.integrations.lightning.TraceprofCallback``: PyTorch Lightning's ``Trainer``.

Each runs a :class:`traceprof.capture.profile` session over the steps asked for, writes the
traces into the trainer's log directory, analyzes them and logs the headline numbers
(``docs/capture.md``). Importing this package imports neither torch nor the frameworks; each
submodule imports its framework.
"""

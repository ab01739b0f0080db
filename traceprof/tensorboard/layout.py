"""Where things live in a TensorBoard log directory written by traceprof (docs/tensorboard.md).

```
LOGDIR/<run>/
  <worker>.pt.trace.json.gz          copy of the trace for torch-tb-profiler (PyTorch Profiler tab)
  events.out.tfevents.*              scalars and the text summary (Scalars / Text tabs)
  plugins/traceprof/run.json         the run index; written last, so its presence means complete
  plugins/traceprof/profile.json     traceprof's JSON profile (mean of the complete steps)
  plugins/traceprof/step-<N>.json    the JSON profile of ProfilerStep#N alone
```

Shared by the writer and the TensorBoard plugin; imports nothing from tensorboard.
"""

from __future__ import annotations

import json
import os

PLUGIN_NAME = "traceprof"
PLUGIN_DIR = os.path.join("plugins", PLUGIN_NAME)
RUN_INDEX = "run.json"
RUN_SCHEMA = "traceprof.tensorboard.run/1"
MEAN_PROFILE = "profile.json"


def step_profile_name(step: int) -> str:
    return f"step-{step}.json"


def run_index_path(run_dir: str) -> str:
    return os.path.join(run_dir, PLUGIN_DIR, RUN_INDEX)


def is_run_dir(path: str) -> bool:
    return os.path.isfile(run_index_path(path))


def find_runs(logdir: str) -> dict[str, str]:
    """Run name (path relative to the logdir, with '/') -> run directory, sorted by name."""
    runs: dict[str, str] = {}
    if not logdir or not os.path.isdir(logdir):
        return runs
    for root, dirs, _files in os.walk(logdir):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if is_run_dir(root):
            rel = os.path.relpath(root, logdir)
            name = "." if rel == "." else rel.replace(os.sep, "/")
            runs[name] = root
            if "plugins" in dirs:  # a run's plugin data holds no runs
                dirs.remove("plugins")
    return dict(sorted(runs.items()))


def read_run_index(run_dir: str) -> dict | None:
    try:
        with open(run_index_path(run_dir), encoding="utf-8") as f:
            index = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(index, dict) or index.get("schema") != RUN_SCHEMA:
        return None
    return index

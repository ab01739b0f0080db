"""Where things live in a TensorBoard log directory written by traceprof (docs/tensorboard.md).

```
LOGDIR/<run>/
  <worker>.pt.trace.json.gz          copy of the trace for torch-tb-profiler (PyTorch Profiler tab)
  events.out.tfevents.*              scalars and the text summary (Scalars / Text tabs)
  plugins/traceprof/run.json         the run index; written last, so its presence means complete
  plugins/traceprof/profile.json     traceprof's JSON profile (mean of the complete steps)
  plugins/traceprof/step-<N>.json    the JSON profile of ProfilerStep#N alone
  plugins/traceprof/job.json         the job the run is a rank of (several ranks of one job)
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
    """The run index of ``run_dir``; None when it is missing, unreadable or malformed."""
    try:
        with open(run_index_path(run_dir), "rb") as f:
            return parse_run_index(f.read())
    except (OSError, ValueError):
        return None


def parse_json_object(data: bytes) -> dict:
    """A JSON object from UTF-8 bytes; ValueError with a short reason for anything else."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"is not UTF-8 (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"is not valid JSON (line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise ValueError("is not valid JSON (nested too deeply)") from None
    if not isinstance(doc, dict):
        raise ValueError(f"is a JSON {type(doc).__name__}, not an object")
    return doc


_UTF8_CHUNK = 1 << 20


def check_json_object(data: bytes) -> None:
    """What :func:`parse_json_object` checks, without building the document: the bytes are
    UTF-8 and one JSON object (its values are checked as JSON and skipped), so a profile of
    hundreds of MB costs no more memory than its bytes. ValueError with a short reason."""
    import codecs

    import msgspec

    decoder = codecs.getincrementaldecoder("utf-8")()
    for start in range(0, len(data), _UTF8_CHUNK):
        try:
            decoder.decode(data[start : start + _UTF8_CHUNK], final=start + _UTF8_CHUNK >= len(data))
        except UnicodeDecodeError as e:
            raise ValueError(f"is not UTF-8 (byte {start + e.start})") from None
    try:
        msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    except msgspec.ValidationError:
        kind = _JSON_KINDS.get(data.lstrip()[:1], "value")
        raise ValueError(f"is a JSON {kind}, not an object") from None
    except msgspec.DecodeError as e:
        raise ValueError(f"is not valid JSON ({e})") from None
    except RecursionError:
        raise ValueError("is not valid JSON (nested too deeply)") from None


_JSON_KINDS = {b"[": "list", b'"': "str", b"t": "bool", b"f": "bool", b"n": "null"}


def is_plain_file_name(name) -> bool:
    """A file name without a directory part: what run.json may name as a profile."""
    return isinstance(name, str) and name not in ("", ".", "..") and not any(c in name for c in "/\\\0")


def parse_run_index(data: bytes) -> dict:
    """The run index (run.json) from its bytes, with the fields the plugin follows checked:
    ``schema``, ``profiles.mean`` and ``steps[].{step,profile}`` (profiles are plain file names
    in the run's plugin directory). ValueError with a short reason when it is malformed."""
    index = parse_json_object(data)
    if index.get("schema") != RUN_SCHEMA:
        raise ValueError(f"has schema {str(index.get('schema'))[:60]!r}, not {RUN_SCHEMA!r}")
    profiles = index.get("profiles")
    if not isinstance(profiles, dict) or not is_plain_file_name(profiles.get("mean")):
        raise ValueError("has no profiles.mean file name")
    steps = index.get("steps", [])
    if not isinstance(steps, list) or not all(
        isinstance(s, dict) and type(s.get("step")) is int and is_plain_file_name(s.get("profile"))
        for s in steps
    ):
        raise ValueError("has steps that are not {step: integer, profile: file name}")
    return index


#: the job a run's trace belongs to (traceprof tensorboard of several ranks of one job): the
#: job's JSON document (docs/jobs.md) with ``runs``, rank -> run name; in every rank's run
JOB_FILE = "job.json"

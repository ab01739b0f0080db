"""Compiled attribution on the models people compile: a zoo of ``transformers`` models built
from configs (tests/zoo_models.py), each captured eager and ``torch.compile``d, training and
inference, and compiled other ways (dynamic shapes, ``fullgraph``, ``max-autotune``, regional
compilation). For each compiled trace, against the eager trace of the same model and step:

- the compiled-kernel table is in the trace, nothing left out of it, every kernel call of
  its graphs joined to a module;
- the module tree holds the same qualified names;
- matrix FLOPs (multiply-accumulates) per module and pass are equal within 1%;
- all FLOPs per block (a transformer layer, a stage) and pass are equal within 5%;
- the share of the root's time that lands in its submodules (less the compiled code's own
  time: Dynamo's guards and the graphs' wrappers, which a busy machine stretches) is at least
  0.9 of eager's (T5's training step: 0.7, its dropout masks are one kernel of the whole model,
  see tests/zoo_models.py);
- the table view's totals (parameters, mult-adds, sizes) are eager's.

The traces are captured once per test run, in two worker processes (Inductor's C++ kernels
compile with gcc: minutes for the whole zoo).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import shutil
from concurrent.futures import ProcessPoolExecutor, as_completed

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import traceprof
from traceprof.result.model import ModuleProfile, NodeKind

from .zoo_models import COVERAGE_RATIO, FAMILIES, VARIANTS, capture_task, compare

pytestmark = [
    pytest.mark.skipif(
        not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")),
        reason="torch.compile on CPU needs a C++ compiler",
    ),
    # the captures (every family compiled, in two workers) run in the first test's setup: the
    # suite's 300 s guard against a hang would stop them
    pytest.mark.timeout(3600),
]

#: the slowest to compile first, so that two workers finish together
ORDER = ("whisper", "convnext", "t5", "mixtral", "bert", "gpt2", "llama", "vit", "qwen2", "gemma")


@pytest.fixture(scope="session")
def zoo(tmp_path_factory) -> dict[str, str]:
    """``"<family>/<train|infer>_<eager|compiled>"`` and ``"variant/<name>"`` -> trace path."""
    out = tmp_path_factory.mktemp("zoo")
    tasks = [("family", n) for n in ORDER if n in FAMILIES] + [("variant", v) for v in VARIANTS]
    paths: dict[str, str] = {}
    # the workers compile into a cache of their own (shared by the two): what other runs left
    # in Inductor's cache (a kernel half written by a process that was killed) cannot fail them
    saved = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path_factory.mktemp("inductor"))
    try:
        with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(capture_task, task, str(out)): task for task in tasks}
            try:
                for future in as_completed(futures):
                    kind, name = futures[future]
                    for key, path in future.result().items():
                        if key == "seconds":  # how long the task took, kept beside the traces
                            with open(out / "seconds.txt", "a", encoding="utf-8") as f:
                                f.write(f"{kind} {name} {path}\n")
                            continue
                        paths[f"{name}/{key}" if kind == "family" else f"variant/{key}"] = path
            except BaseException:  # a failed capture: the others are not waited for
                pool.shutdown(wait=False, cancel_futures=True)
                for process in list(getattr(pool, "_processes", {}).values()):
                    process.terminate()  # its cache is this run's own
                raise
    finally:
        if saved is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = saved
    return paths


@functools.cache
def analyzed(path: str) -> ModuleProfile:
    profile = traceprof.analyze(path)
    profile.self_check()
    return profile


CASES = [(f, m) for f in FAMILIES for m in ("train", "infer")]


@pytest.mark.parametrize(("family", "mode"), CASES, ids=[f"{f}-{m}" for f, m in CASES])
def test_compiled_zoo_model(zoo, family, mode):
    eager = analyzed(zoo[f"{family}/{mode}_eager"])
    compiled = analyzed(zoo[f"{family}/{mode}_compiled"])
    coverage = FAMILIES[family].coverage.get(mode, (COVERAGE_RATIO, ""))[0]
    findings = compare(eager, compiled, FAMILIES[family].blocks, coverage)
    assert not findings, "\n".join(findings)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_compiled_zoo_variant(zoo, variant):
    family, _ = VARIANTS[variant]
    eager = analyzed(zoo[f"{family}/train_eager"])
    compiled = analyzed(zoo[f"variant/{variant}"])
    findings = compare(eager, compiled, FAMILIES[family].blocks)
    assert not findings, "\n".join(findings)


def test_compiled_zoo_covers_the_families_people_compile():
    kinds = {f.kind for f in FAMILIES.values()}
    assert len(FAMILIES) >= 10
    assert {"decoder", "moe", "encoder", "encoder-decoder", "vision", "audio"} <= kinds


def test_compiled_zoo_module_nodes_are_modules(zoo):
    """Compiled trees hold the model's modules, each once: no duplicated subtree (``model.*``
    beside ``0.model.*``), no second root."""
    for key, path in zoo.items():
        if "compiled" not in key and not key.startswith("variant/"):
            continue
        profile = analyzed(path)
        names = [n.qualified_name for n in profile.walk() if n.kind is NodeKind.MODULE]
        assert len(names) == len(set(names)), key
        roots = [profile.nodes[r] for r in profile.roots if profile.nodes[r].kind is NodeKind.MODULE]
        assert len(roots) == 1 and roots[0].qualified_name == "", (key, [r.label for r in roots])

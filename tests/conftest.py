from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"
SAMPLE_TRACES = REPO / "sample_traces"


def pytest_configure(config):
    """The suite runs with the cache of decoded traces and analyses turned off (and so do the
    commands it starts): a test of reading, limits or progress must see the trace read.
    tests/test_cache.py turns it on, in a directory of its own, where it tests it."""
    import os

    os.environ["TRACEPROF_CACHE"] = "off"


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden", action="store_true", help="rewrite tests/golden/* from the current output"
    )


@pytest.fixture
def update_golden(request) -> bool:
    return request.config.getoption("--update-golden")


@pytest.fixture
def analyze_built(tmp_path):
    """Write a TraceBuilder trace to a file, analyze it, check the invariants, return the profile."""
    import traceprof

    def run(builder, **kw):
        path = builder.write(tmp_path / "t.json")
        profile = traceprof.analyze(path, **kw)
        profile.self_check()
        return profile

    return run


@pytest.fixture(scope="session")
def compiled_traces(tmp_path_factory) -> dict[str, tuple[str, str]]:
    """name -> ``(eager_path, compiled_path)``: one training step of each tiny model of
    ``tests/compiled_models.py`` (``gpt``: ``torch.compile(model)``; ``cnn``: ``model.compile()``;
    ``graph_break``; ``per_block``: blocks compiled one by one), traced by
    ``traceprof.capture.profile`` eager and compiled. Compiled once per test run (CPU, Inductor's
    C++ backend: tens of seconds with a cold kernel cache)."""
    pytest.importorskip("torch")
    import shutil

    if not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")):
        pytest.skip("torch.compile on CPU needs a C++ compiler")
    from .compiled_models import capture_compiled_traces

    return capture_compiled_traces(tmp_path_factory.mktemp("compiled_traces"))

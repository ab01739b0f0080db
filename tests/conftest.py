from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"
SAMPLE_TRACES = REPO / "sample_traces"


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

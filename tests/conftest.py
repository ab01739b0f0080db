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

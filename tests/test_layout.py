"""The package's layering (docs/architecture.md) is checked by import-linter with the contracts in
pyproject.toml. These tests show the checks bite: a copy of the package with one upward import,
or torch imported outside capture/, fails `lint-imports`, while the unchanged copy passes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_copy(tmp_path: Path, edit: tuple[str, str] | None = None) -> subprocess.CompletedProcess:
    """lint-imports over a copy of the package, with ``edit`` = (module file, line) appended."""
    assert LINT_IMPORTS.exists(), "lint-imports is missing: install the 'lint' extra (scripts/test.sh does)"
    shutil.copytree(REPO / "traceprof", tmp_path / "traceprof", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    if edit:
        path = tmp_path / "traceprof" / edit[0]
        path.write_text(path.read_text() + "\n" + edit[1] + "\n")
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(tmp_path), "PATH": ""},
    )


def test_the_package_keeps_its_contracts(tmp_path):
    proc = lint_copy(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


@pytest.mark.parametrize(
    "edit, broken",
    [
        (
            ("trace/schema.py", "from traceprof.render import registry as _r  # noqa"),
            "stages import only the stages below them",
        ),
        (
            ("analysis/link.py", "def _later():\n    from traceprof.job import records  # noqa"),
            "stages import only the stages below them",
        ),
        (
            ("cli/diff.py", "from traceprof.cli.analyze import analyze as _a  # noqa"),
            "no command imports another",
        ),
        (("result/model.py", "import torch as _t  # noqa"), "torch is imported by the capture helper only"),
    ],
    ids=["upward", "upward-lazy", "command-to-command", "torch"],
)
def test_a_broken_layer_fails_the_check(tmp_path, edit, broken):
    proc = lint_copy(tmp_path, edit)
    assert proc.returncode != 0
    assert f"{broken} BROKEN" in " ".join(proc.stdout.split()), proc.stdout

"""The README's quick start: its first command analyzes a shipped sample, its second is the one
command CI runs (.ci/run), and that command installs what the tests need by itself."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _quick_start() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_quick_start_has_two_commands():
    assert len(_quick_start()) == 2


def test_ci_runs_the_readme_test_command():
    test_command = _quick_start()[1]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in [line.strip() for line in ci]


def test_the_test_command_installs_the_browser_and_the_python_packages():
    script = shlex.split(_quick_start()[1])
    assert script[:1] == ["bash"]
    text = (ROOT / script[1]).read_text()
    assert "chromium-driver" in text and "apt-get install" in text
    assert (
        "torch==${TORCH_VERSION}" in text
        and "[test,capture,tensorboard,transformers,lightning,notebook,lint]" in text
    )
    # the checks run before the tests, each ending the script when it fails (set -e)
    checks = ["lint-imports --no-cache", "ruff check --quiet .", "ruff format --check --quiet .", "mypy"]
    lines = [line.strip() for line in text.splitlines()]
    assert "set -euo pipefail" in lines and all(c in lines for c in checks)
    assert max(lines.index(c) for c in checks) < lines.index('exec python -m pytest -q "$@"')
    assert text.rstrip().endswith('exec python -m pytest -q "$@"')


def test_the_first_command_analyzes_the_shipped_sample():
    first = _quick_start()[0]
    analyze = shlex.split(first.split("&&", 1)[1])
    assert analyze[0] == "traceprof" and (ROOT / analyze[2]).is_file()
    done = subprocess.run(
        [sys.executable, "-m", "traceprof", *analyze[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Detailed Profile per GPU" in done.stdout and "layer1" in done.stdout

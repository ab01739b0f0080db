#!/usr/bin/env bash
# Install everything the test suite needs on a fresh machine, then run it.
#
#   bash scripts/test.sh [pytest arguments]
#
# - System packages: headless Chromium and its driver (Debian `chromium`, `chromium-driver`), for
#   the HTML report and TensorBoard tab tests; installed with apt-get (through sudo when not root)
#   only when missing.
# - Python packages: the CPU build of torch (pinned: a bare `torch` pulls a multi-GB CUDA build)
#   and traceprof with its test, capture, TensorBoard, transformers, lightning and notebook
#   extras (the integrations' tests run the real libraries), into the active virtual
#   environment, or into ./.venv (created when missing) when no environment is active.
# - Then the checks, each failing the run when broken: `lint-imports` (the stages import only
#   the stages below them, torch stays in capture/: the contracts in pyproject.toml), `ruff check`,
#   `ruff format --check`, and `mypy` (strict on the data model and the analysis stages).
# - Then `python -m pytest -q` from the project root, with any arguments given.
#
# .ci/run runs this same script.
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_VERSION="2.13.0"

if ! { command -v chromium >/dev/null && command -v chromedriver >/dev/null; }; then
    echo "test.sh: installing chromium and chromium-driver (Debian packages)" >&2
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
fi

if [ -z "${VIRTUAL_ENV:-}" ]; then
    if [ ! -x .venv/bin/python ]; then
        echo "test.sh: creating the virtual environment .venv" >&2
        python3 -m venv .venv
    fi
    # shellcheck disable=SC1091
    . .venv/bin/activate
fi

python -m pip install -q --upgrade pip
python -m pip install -q "torch==${TORCH_VERSION}"
python -m pip install -q -e '.[test,capture,tensorboard,transformers,lightning,notebook,lint]'

echo "test.sh: checks: lint-imports, ruff check, ruff format --check, mypy" >&2
lint-imports --no-cache
ruff check --quiet .
ruff format --check --quiet .
mypy

exec python -m pytest -q "$@"

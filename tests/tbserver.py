"""A real TensorBoard for the tests: start it on 127.0.0.1 in its own process group, talk to it
over HTTP, stop it (with its helpers) afterwards."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 30):
    """(status, body) of a GET; body decoded as JSON when it is JSON."""
    request = urllib.request.Request(url, headers={"Accept-Encoding": "identity"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, data = response.status, response.read()
            ctype = response.headers.get("Content-Type", "")
            encoding = response.headers.get("Content-Encoding", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    if encoding == "gzip":
        data = gzip.decompress(data)
    if ctype.startswith("application/json"):
        return status, json.loads(data)
    return status, data


def get_json(url: str):
    status, body = get(url)
    assert status == 200, f"{url}: HTTP {status}: {body[:300]!r}"
    return body


def wait_for(what: str, check, timeout_s: float, proc: subprocess.Popen | None = None, log=None):
    """Poll ``check()`` until it returns a true value; bounded."""
    deadline = time.monotonic() + timeout_s
    last_error = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"TensorBoard exited ({proc.returncode}) while waiting for {what}:\n{_tail(log)}")
        try:
            result = check()
            if result:
                return result
        except (OSError, urllib.error.URLError, ValueError, KeyError) as e:
            last_error = e
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what} (last error: {last_error})\n{_tail(log)}")


def _tail(log) -> str:
    if log is None:
        return ""
    try:
        return Path(log).read_text(errors="replace")[-3000:]
    except OSError:
        return ""


def start_process(argv: list[str], log_path: Path) -> subprocess.Popen:
    log = open(log_path, "wb")
    try:
        # its own process group: TensorBoard's helpers (data server, loaders) stop with it
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    finally:
        log.close()


def stop_process(proc: subprocess.Popen) -> None:
    """Stop the process group started by start_process: SIGTERM, then SIGKILL; bounded."""
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # helpers left in the group after the leader exited
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass

"""A ``--scheduler`` address that is not a Dask scheduler (issue 33, item 4), with real local
listener sockets and a real Dask cluster: one that accepts and never answers is an error after
``--scheduler-timeout`` (it hung 90 s and more); one that answers with other bytes (an HTTP
server, Dask's own dashboard) or is a worker is named as such (it read a 3 EiB frame length and
said "out of memory"); a real scheduler still runs the job."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

pytest.importorskip("distributed")

from .conftest import SHARED_TRACES

RANKS = sorted((SHARED_TRACES / "multi_rank_t4").glob("*.json.gz"))[:2]


class Listener:
    """A TCP server on 127.0.0.1 that does ``behaviour`` with every connection it accepts:
    ``silent`` (accepts, never answers), ``http`` (answers as an HTTP server does), ``close``
    (closes at once)."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp://127.0.0.1:{self.server.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.accepted.append(connection)
            if self.behaviour == "http":
                connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            elif self.behaviour == "close":
                connection.close()

    def close(self) -> None:
        self.server.close()
        for connection in self.accepted:
            connection.close()


@pytest.fixture
def listener(request) -> Iterator[Listener]:
    server = Listener(request.param)
    yield server
    server.close()


#: --scheduler-timeout where the address answers (a server that is no scheduler, a real one)
ANSWERED_TIMEOUT_S = 30


def run_job(scheduler: str, timeout_s: int = 2) -> subprocess.CompletedProcess:
    """``traceprof analyze`` of two ranks on ``scheduler``; the subprocess's timeout only guards
    against a hang."""
    return subprocess.run(
        [sys.executable, "-m", "traceprof", "analyze", *map(str, RANKS), "--engine", "dask"]
        + ["--scheduler", scheduler, "--scheduler-timeout", str(timeout_s), "--no-cache"],
        capture_output=True,
        text=True,
        timeout=240,
    )


def one_line(proc: subprocess.CompletedProcess, code: int) -> str:
    assert proc.returncode == code, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceprof: error: --scheduler "), proc.stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize("listener", ["silent"], indirect=True)
def test_a_listener_that_never_answers_is_an_error_after_the_timeout(listener):
    line = one_line(run_job(listener.address), 3)  # before: a wait of 90 s and more
    assert line.endswith(
        f"{listener.address}: no Dask scheduler answered in 2 s (is it running and "
        "reachable from here? --scheduler-timeout waits longer)"
    )
    assert listener.accepted  # it was connected to, and said nothing


@pytest.mark.parametrize("listener", ["http", "close"], indirect=True)
def test_a_server_that_is_no_dask_scheduler_is_named_so(listener):
    # the listener answers from a thread of this process: a long timeout, so that a busy
    # machine (this process's other threads holding the GIL) cannot turn its answer into none
    # (the command ends when it answers, not after the timeout)
    line = one_line(run_job(listener.address, ANSWERED_TIMEOUT_S), 3)  # before: "out of memory ..."
    assert "what answered there is not a Dask scheduler" in line
    assert "give the scheduler's tcp://HOST:PORT, not its dashboard's or a worker's" in line


def test_dasks_own_dashboard_and_workers_are_not_its_scheduler():
    from distributed import LocalCluster

    cluster = LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        protocol="tcp",
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.CRITICAL,
    )
    try:
        dashboard = f"tcp://127.0.0.1:{cluster.scheduler.http_server.port}"
        # its HTTP server waits for a request that the Dask handshake never completes
        assert "no Dask scheduler answered in 2 s" in one_line(run_job(dashboard), 3)  # before: 90 s and more
        (worker,) = cluster.scheduler_info["workers"]
        assert "that is a Dask worker, not a scheduler" in one_line(run_job(worker, ANSWERED_TIMEOUT_S), 3)
        proc = run_job(cluster.scheduler_address, ANSWERED_TIMEOUT_S)  # the scheduler itself
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "Stragglers" in proc.stdout or "rank" in proc.stdout
    finally:
        cluster.close()

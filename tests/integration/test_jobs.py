"""Ingest as a job (issue 17): the CLI follows it with a 1 s client timeout while every batch
takes longer than that, a second terminal sees it, `jobs cancel` stops one, and Ctrl-C exits
130 having left the job running or, when asked on a terminal, cancelled it.

The embedding endpoint is the fake OpenAI-compatible server, slowed down per request, so the
timings do not depend on the machine's speed.
"""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.fake_openai import FakeOpenAI, Reply
from tests.integration.conftest import Daemon

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SLOW_S = 1.5  # each embedding request; more than the CLI's 1 s timeout


@pytest.fixture
def slow_daemon(make_daemon: Callable[..., Daemon]) -> Iterator[tuple[Daemon, FakeOpenAI]]:
    with FakeOpenAI(dimension=16) as server:
        daemon = make_daemon(
            RECALLD_EMBED__MODEL="openai:fake-embed",
            RECALLD_EMBED__BASE_URL=server.base_url,
            RECALLD_EMBED__BATCH_SIZE="1",
            RECALLD_EMBED__TIMEOUT_S="120",
            OPENAI_API_KEY="test-key",
        )
        daemon.start()
        daemon.wait_ready()
        yield daemon, server
    daemon.stop()  # after the server: its stalled answers end with it


def notes(folder: Path, count: int, word: str) -> Path:
    folder.mkdir()
    for i in range(count):
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\nThe {word} census, entry {i}.\n")
    return folder


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[str]]]:
    """CLI processes a test starts; any still running at the end is killed and reaped."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


@pytest.fixture(autouse=True)
def interruptible_children() -> Iterator[None]:
    """The CLIs these tests interrupt start with SIGINT at its default, as from a terminal:
    a suite run as a background job (`make test &`) has SIGINT ignored, children inherit
    that, and Python then never raises KeyboardInterrupt."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def cli(
    spawned: list[subprocess.Popen[str]], daemon: Daemon, *args: str, **env: str
) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "recalld", *args],
        env={**daemon.env, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    spawned.append(proc)
    return proc


def cli_json(daemon: Daemon, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "recalld", *args, "--json"],
        env=daemon.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def running_job(daemon: Daemon, timeout: float = 30) -> dict[str, Any]:
    """The job once it runs and has counted its files."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for job in daemon.client.jobs():
            if job["state"] == "running" and job["total"] is not None:
                return job
        time.sleep(0.05)
    raise AssertionError(f"no running job: {daemon.client.jobs()}")


def test_a_followed_ingest_outlives_a_1s_client_timeout_and_others_see_it(
    slow_daemon: tuple[Daemon, FakeOpenAI], tmp_path: Path, spawned: list[subprocess.Popen[str]]
) -> None:
    daemon, server = slow_daemon
    server.script("embeddings", *[Reply(delay_s=SLOW_S) for _ in range(4)])
    folder = notes(tmp_path / "walrus", 4, "walrus")
    proc = cli(spawned, daemon, "ingest", str(folder), "--json", RECALLD_CLIENT__TIMEOUT_S="1")
    # A second terminal: the job, its figures and the file being worked on.
    job = running_job(daemon)
    assert job["kind"] == "ingest" and job["path"] == str(folder) and job["total"] == 4
    seen = cli_json(daemon, "jobs", "list")
    assert [j["id"] for j in seen] == [job["id"]] and seen[0]["state"] == "running"
    assert [j["id"] for j in cli_json(daemon, "status")["jobs"]] == [job["id"]]
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    report = json.loads(out)
    assert report["files"] == 4 and report["ingested"] == 4 and report["job"] == job["id"]
    # Every batch took longer than the client's timeout, and the job still finished.
    assert len(server.requests_to("embeddings")) >= 5  # the start-up probe, then one a chunk
    done = cli_json(daemon, "jobs", "get", job["id"])
    assert done["state"] == "done" and done["done"] == 4 and done["result"]["ingested"] == 4
    assert done["chunks"] == report["chunks"] and done["rate"] > 0
    assert daemon.search_sources("walrus census") != []
    assert "internal error" not in daemon.log.read_text()


def test_cancel_a_detached_job(slow_daemon: tuple[Daemon, FakeOpenAI], tmp_path: Path) -> None:
    daemon, server = slow_daemon
    server.script("embeddings", *[Reply(delay_s=30) for _ in range(3)])
    folder = notes(tmp_path / "otter", 3, "otter")
    started = cli_json(daemon, "ingest", str(folder), "--detach")
    assert started["state"] in ("queued", "running") and started["path"] == str(folder)
    running_job(daemon)
    cancelled = cli_json(daemon, "jobs", "cancel", started["id"])
    assert cancelled["state"] == "cancelled" and cancelled["error"]["message"] == "cancelled"
    assert cancelled["done"] < 3
    assert daemon.client.job(started["id"])["state"] == "cancelled"
    assert daemon.client.status()["state"] == "ready"


def test_ctrl_c_exits_130_and_leaves_the_job_running(
    slow_daemon: tuple[Daemon, FakeOpenAI], tmp_path: Path, spawned: list[subprocess.Popen[str]]
) -> None:
    daemon, server = slow_daemon
    server.script("embeddings", *[Reply(delay_s=30) for _ in range(3)])
    folder = notes(tmp_path / "heron", 3, "heron")
    proc = cli(spawned, daemon, "ingest", str(folder))
    job = running_job(daemon)
    time.sleep(0.5)  # the CLI is following it
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert f"recalld jobs cancel {job['id']}" in err
    assert daemon.client.job(job["id"])["state"] == "running"  # not asked, so left alone
    daemon.client.cancel_job(job["id"])


def test_ctrl_c_on_a_terminal_asks_and_cancels(
    slow_daemon: tuple[Daemon, FakeOpenAI], tmp_path: Path, spawned: list[subprocess.Popen[str]]
) -> None:
    daemon, server = slow_daemon
    server.script("embeddings", *[Reply(delay_s=30) for _ in range(3)])
    folder = notes(tmp_path / "egret", 3, "egret")
    primary, secondary = pty.openpty()  # stdin is a terminal, so the CLI can ask
    proc = subprocess.Popen(
        [sys.executable, "-m", "recalld", "ingest", str(folder)],
        env=daemon.env,
        stdin=secondary,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    spawned.append(proc)
    os.close(secondary)
    try:
        job = running_job(daemon)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        os.write(primary, b"y\n")
        _, err = proc.communicate(timeout=30)
    finally:
        os.close(primary)
    assert proc.returncode == 130, err
    assert f"Cancel ingest job {job['id']}?" in err and f"Cancelled job {job['id']}" in err
    assert daemon.client.job(job["id"])["state"] == "cancelled"

"""`python -m recalld serve` as a real subprocess on a temp home, polled until `status`
answers and always terminated (datasette's fixture)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from recalld.client import Client
from recalld.errors import DaemonError


class Daemon:
    """One daemon process and a client for it."""

    def __init__(self, home: Path, socket: Path, **env: str) -> None:
        self.home = home
        self.socket = socket
        self.log = home / "daemon.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("RECALLD_", "XDG_"))}
        self.env.update(
            {
                "RECALLD_HOME": str(home),
                "RECALLD_EMBED__MODEL": "hash:64",
                "RECALLD_DAEMON__SOCKET": str(socket),
                "PYTHONUNBUFFERED": "1",
                **env,
            }
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.client = Client(socket, timeout=30)

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        self.home.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "recalld", "serve", "--log-level", "debug", *args],
                env=self.env,
                stdout=log,
                stderr=log,
            )
        return self.proc

    def wait_ready(self, timeout: float = 60) -> dict[str, Any]:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"daemon exited with {self.proc.returncode}:\n" + self.log.read_text()[-3000:]
                )
            try:
                status: dict[str, Any] = self.client.status()
                return status
            except DaemonError:
                self.client.close()
            if time.monotonic() > deadline:
                raise AssertionError("daemon did not answer:\n" + self.log.read_text()[-3000:])
            time.sleep(0.05)

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30, settle: float = 0.4
    ) -> dict[str, Any]:
        """Poll `status` until it is idle and `predicate(status)` holds, twice `settle` apart
        (a file event may still be in the watcher's debounce)."""
        deadline = time.monotonic() + timeout
        streak = 0
        while True:
            status = self.client.status()
            if status["pending"] == 0 and predicate(status):
                streak += 1
                if streak == 2:
                    return status
                time.sleep(settle)
                continue
            streak = 0
            if time.monotonic() > deadline:
                raise AssertionError(f"not reached: {status}\n" + self.log.read_text()[-3000:])
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        self.client.close()
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self.proc = None

    def search_sources(self, query: str, **kwargs: Any) -> list[str]:
        hits = self.client.search(query, mode="bm25", **kwargs)["hits"]
        return [h["source"] for h in hits]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ri-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_daemon(tmp_path: Path, short_dir: Path) -> Iterator[Callable[..., Daemon]]:
    """Build daemons on a temp home; every one still running at the end is killed."""
    made: list[Daemon] = []

    def make(home: Path | None = None, socket: Path | None = None, **env: str) -> Daemon:
        daemon = Daemon(home or tmp_path / "rhome", socket or short_dir / "s.sock", **env)
        made.append(daemon)
        return daemon

    yield make
    for daemon in made:
        if daemon.proc is not None:
            daemon.stop(signal.SIGKILL)

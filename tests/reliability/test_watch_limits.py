"""Watched folders that slip away (issue 18 item 5), against a real daemon process: past the
inotify watch limit a folder is polled and `status` and the log say so; a watched folder that
is deleted and created again is watched again.

The watch limit is made real without touching the machine's: the daemon runs in its own user
namespace (`unshare --user --map-root-user`), whose `/proc/sys/user/max_inotify_watches` it
may lower for itself alone (Linux 5.11+). Where user namespaces are not allowed that test is
skipped; the recreated-folder test runs everywhere.
"""

from __future__ import annotations

import errno
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from recalld.ingest.watcher import PathFilter, Watcher
from tests.integration.conftest import Daemon

pytestmark = pytest.mark.integration

WATCH_LIMIT = 20


def userns_with_few_watches() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "sh",
            "-c",
            f"echo {WATCH_LIMIT} > /proc/sys/user/max_inotify_watches",
        ],
        capture_output=True,
    )
    return probe.returncode == 0


class LimitedDaemon(Daemon):
    """The daemon in a user namespace of its own, with few inotify watches."""

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        self.home.mkdir(parents=True, exist_ok=True)
        serve = [sys.executable, "-m", "recalld", "serve", "--log-level", "debug", *args]
        script = f'echo {WATCH_LIMIT} > /proc/sys/user/max_inotify_watches && exec "$@"'
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                ["unshare", "--user", "--map-root-user", "sh", "-c", script, "sh", *serve],
                env=self.env,
                stdout=log,
                stderr=log,
            )
        return self.proc


def found(daemon: Daemon, query: str) -> set[str]:
    return {Path(s).name for s in daemon.search_sources(query, limit=50)}


def test_past_the_watch_limit_a_folder_is_polled_and_status_says_so(
    tmp_path: Path, short_dir: Path
) -> None:
    if not userns_with_few_watches():
        pytest.skip("user namespaces are not allowed here, so the watch limit cannot be set")
    small = tmp_path / "small"
    (small / "inner").mkdir(parents=True)
    big = tmp_path / "big"
    for i in range(2 * WATCH_LIMIT):
        (big / f"d{i:03d}").mkdir(parents=True)
    daemon = LimitedDaemon(tmp_path / "home", short_dir / "s.sock")
    daemon.start()
    try:
        daemon.wait_ready()
        daemon.client.sources_add(small)
        daemon.client.sources_add(big)
        status = daemon.wait_for(lambda s: bool(s["watch"]["polled"]), timeout=30)
        assert status["watch"]["polled"] == [str(big)]
        assert "max_user_watches" in status["watch"]["reason"]
        assert "cannot watch" in daemon.log.read_text()
        # Files written now, deep in the polled folder and in the watched one, both go in.
        (big / f"d{2 * WATCH_LIMIT - 1:03d}" / "deep.md").write_text("A deep note on ibexes.\n")
        (small / "inner" / "near.md").write_text("A near note on ibexes.\n")
        daemon.wait_for(lambda s: found(daemon, "ibexes") == {"deep.md", "near.md"}, timeout=30)
        assert daemon.stop() == 0
    finally:
        daemon.client.close()
        if daemon.proc is not None:
            daemon.proc.kill()
            daemon.proc.wait()


async def test_past_the_watch_limit_the_root_needing_most_watches_is_polled_first(
    tmp_path: Path,
) -> None:
    # The error names where adding a watch failed: on a busy machine, a small root added beside
    # a big one (the watcher before had not let go of its watches yet). Polling the small one
    # would free nothing; the big one is polled, then the next if the limit is still reached.
    small, big = tmp_path / "small", tmp_path / "big"
    (small / "inner").mkdir(parents=True)
    for i in range(30):
        (big / f"d{i:02d}").mkdir(parents=True)
    watcher = Watcher(lambda path, deleted: None, PathFilter())
    watcher.roots = (small, big)
    full = OSError(errno.ENOSPC, f'OS file watch limit reached. about ["{small / "inner"}"]')
    assert await watcher._over_watch_limit(ValueError("not a limit")) is None
    assert await watcher._over_watch_limit(full) == big
    assert watcher.state()["polled"] == [str(big)]
    assert await watcher._over_watch_limit(full) == small
    assert watcher.state()["polled"] == [str(small), str(big)]
    assert await watcher._over_watch_limit(full) is None  # nothing left on inotify


def test_a_watched_folder_deleted_and_recreated_is_watched_again(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "first.md").write_text("The first note on lynxes.\n")
    daemon = make_daemon()
    daemon.start()
    daemon.wait_ready()
    daemon.client.sources_add(folder)
    daemon.wait_for(lambda s: found(daemon, "lynxes") == {"first.md"})
    shutil.rmtree(folder)
    daemon.wait_for(lambda s: found(daemon, "lynxes") == set())
    folder.mkdir()
    time.sleep(0.1)
    (folder / "second.md").write_text("The second note on lynxes.\n")
    daemon.wait_for(lambda s: found(daemon, "lynxes") == {"second.md"}, timeout=30)
    # And it is watched, not just rescanned once: a later file goes in too.
    time.sleep(1)
    (folder / "third.md").write_text("The third note on lynxes.\n")
    daemon.wait_for(lambda s: found(daemon, "lynxes") == {"second.md", "third.md"}, timeout=30)
    assert daemon.stop() == 0


def test_a_watched_folder_replaced_by_one_with_its_inode_is_watched_again(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    """ext4 hands a deleted folder's inode to the next one made: a check by device and inode
    alone cannot tell the new folder from the old one, whose watch went with it."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "first.md").write_text("The first note on lynxes.\n")
    daemon = make_daemon()
    daemon.start()
    daemon.wait_ready()
    daemon.client.sources_add(folder)
    daemon.wait_for(lambda s: found(daemon, "lynxes") == {"first.md"})
    inode = folder.stat().st_ino
    for _ in range(100):  # at once, between two of the watcher's checks; until the inode is back
        shutil.rmtree(folder)
        folder.mkdir()
        if folder.stat().st_ino == inode:
            break
    time.sleep(0.5)
    (folder / "second.md").write_text("The second note on lynxes.\n")
    daemon.wait_for(lambda s: found(daemon, "lynxes") == {"second.md"}, timeout=30)
    time.sleep(1)
    (folder / "third.md").write_text("The third note on lynxes.\n")
    daemon.wait_for(lambda s: found(daemon, "lynxes") == {"second.md", "third.md"}, timeout=30)
    assert daemon.stop() == 0

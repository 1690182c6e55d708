"""Files still being written when they are read (issue 13's flaky bad-input test): a file whose
content is refused is an error, not also its earlier version; one that cannot be read for a while
keeps its last good version."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from subprocess import PIPE

import pytest

from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.errors import IngestError
from recalld.ingest.pipeline import read_capped
from recalld.ingest.scheduler import Job, Scheduler
from recalld.ingest.watcher import PathFilter, WatchedSource
from tests.helpers.postgres import VECTOR_INDEX

LIMIT = 2**20


@pytest.fixture(params=["sqlite", "postgresql"])
async def memory(isolated_home: Path, request: pytest.FixtureRequest) -> AsyncIterator[AsyncMemory]:
    """A store on either backend: the error and the removal share one transaction on both."""
    env = {"RECALLD_HOME": str(isolated_home), "RECALLD_EMBED__MODEL": "hash:64"}
    if request.param == "postgresql":
        env |= {
            "RECALLD_STORE__PATH": request.getfixturevalue("pg_url"),
            "RECALLD_STORE__VECTOR_INDEX": VECTOR_INDEX,
        }
    settings = load_settings(None, env).settings
    async with await AsyncMemory.open(settings) as opened:
        opened.ingestor.max_file_bytes = LIMIT
        yield opened


def test_a_file_that_grows_past_the_limit_after_its_stat_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "growing.txt"
    path.write_text("a small start\n")
    assert path.stat().st_size < LIMIT  # what the size check before the open saw
    with path.open("rb") as handle:
        with path.open("ab") as writer:
            writer.write(b"x" * (2 * LIMIT))
        with pytest.raises(IngestError, match="over the 1 MiB limit"):
            read_capped(handle, path, LIMIT)


async def test_a_file_read_empty_then_grown_past_the_limit_is_only_an_error(
    memory: AsyncMemory, tmp_path: Path
) -> None:
    folder = tmp_path / "inbox"
    folder.mkdir()
    huge = folder / "huge.txt"
    scheduler = Scheduler(memory.ingestor, PathFilter())
    scheduler.sources = (WatchedSource(folder, "auto", "config"),)

    # The watcher saw the file created, before its writer gave it any content.
    huge.touch()
    report = await scheduler.process([Job(huge)])
    assert report.empty == 1
    assert await memory.store.read(lambda c: c.document_by_source(str(huge)))

    # Then the writer made it far larger than the limit (sparse: no disk used).
    with huge.open("r+b") as handle:
        handle.truncate(8 * LIMIT)
    os.utime(huge, (1, 1))  # a different mtime, whatever the clock's resolution
    report = await scheduler.process([Job(huge)])
    assert report.failed == 1

    errors = await memory.store.read(lambda r: r.errors())
    assert [(e["source"], e["type"]) for e in errors] == [(str(huge), "IngestError")]
    assert "over the 1 MiB limit" in errors[0]["message"]
    # The empty version read while it was being written is not left behind.
    assert await memory.store.read(lambda c: c.document_by_source(str(huge))) is None


# A second process takes a write lease: every other open of the file would wait for it.
LEASE_HOLDER = """
import fcntl, os, signal, sys, time
signal.signal(signal.SIGIO, signal.SIG_IGN)
fd = os.open(sys.argv[1], os.O_WRONLY)
fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
print("leased", flush=True)
time.sleep(60)
"""


@contextmanager
def held(path: Path) -> Iterator[None]:
    holder = subprocess.Popen([sys.executable, "-c", LEASE_HOLDER, str(path)], stdout=PIPE)
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline() == b"leased\n"
        yield
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


async def test_a_file_that_cannot_be_read_for_a_while_keeps_its_last_good_version(
    memory: AsyncMemory, tmp_path: Path
) -> None:
    folder = tmp_path / "inbox"
    folder.mkdir()
    note = folder / "note.md"
    note.write_text("The walrus colony moved north in spring.\n")
    scheduler = Scheduler(memory.ingestor, PathFilter())
    scheduler.sources = (WatchedSource(folder, "auto", "config"),)
    assert (await scheduler.process([Job(note)])).ingested == 1

    os.utime(note, (1, 1))  # seen as changed, then held by another program when read
    with held(note):
        report = await scheduler.process([Job(note)])
    assert report.failed == 1
    errors = await memory.store.read(lambda r: r.errors())
    assert [e["source"] for e in errors] == [str(note)]
    assert "held by another program" in errors[0]["message"]
    # A read that failed says nothing about the content: the last good version stays.
    assert await memory.store.read(lambda r: r.document_by_source(str(note)))

"""Unsupported is not an error (issue 16, item 5): files no chunker takes are counted as skipped
by type, recorded once per version (not retried by every scan), never in `errors`."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.ingest.scheduler import Job, Scheduler
from recalld.ingest.watcher import PathFilter, WatchedSource


@pytest.fixture
async def memory(isolated_home: Path) -> AsyncIterator[AsyncMemory]:
    settings = load_settings(
        None, {"RECALLD_HOME": str(isolated_home), "RECALLD_EMBED__MODEL": "hash:64"}
    ).settings
    async with await AsyncMemory.open(settings) as opened:
        yield opened


def corpus(root: Path) -> None:
    root.mkdir()
    (root / "notes.md").write_text("The otters live by the weir.\n")
    (root / "archive.gz").write_bytes(b"\x1f\x8b\x08\x00" + os.urandom(500))
    (root / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(500))
    (root / "libfoo.so").write_bytes(b"\x7fELF\x02\x01\x01" + os.urandom(500))
    (root / "tool").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    # Over the size limit, but its type says it is never read: skipped, not "too large".
    (root / "data.sqlite").write_bytes(b"SQLite format 3\x00" + os.urandom(4000))
    # A file that claims a format it does not have is still an error.
    (root / "broken.md").write_bytes(os.urandom(3000))


async def run_scan(scheduler: Scheduler, root: Path) -> list[Job]:
    jobs: list[Job] = []

    async def put(job: Job) -> None:
        jobs.append(job)

    await scheduler.reconcile(root, put)
    return jobs


async def test_unsupported_files_are_skipped_once_and_never_errors(
    memory: AsyncMemory, tmp_path: Path
) -> None:
    root = tmp_path / "p"
    corpus(root)
    memory.ingestor.max_file_bytes = 2048
    scheduler = Scheduler(memory.ingestor, PathFilter())
    scheduler.sources = (WatchedSource(root, "auto", "runtime"),)
    report = await scheduler.process(await run_scan(scheduler, root))
    assert report.skipped == 5 and report.ingested == 1 and report.failed == 1
    assert report.skipped_types == {".gz": 1, ".png": 1, ".so": 1, "binary": 1, ".sqlite": 1}
    errors = await memory.store.read(lambda r: r.errors())
    assert [os.path.basename(e["source"]) for e in errors] == ["broken.md"]
    assert await memory.store.read(lambda r: r.skipped_files()) == {
        ".gz": 1,
        ".png": 1,
        ".so": 1,
        "binary": 1,
        ".sqlite": 1,
    }
    counts = await memory.store.read(lambda r: r.counts())
    assert counts["documents"] == 1  # the skipped files are counted apart
    prefix = f"{root}{os.sep}"
    assert (await memory.store.read(lambda c: c.skipped_files(prefix)))[".gz"] == 1
    assert await memory.store.read(lambda c: c.skipped_files("/elsewhere/")) == {}

    # The next scan (a restart) tries none of them again; only the failed file is queued.
    again = await run_scan(scheduler, root)
    assert [j.path.name for j in again] == ["broken.md"]
    # Nothing they hold is searchable, and the good file is.
    hits = (await memory.search("otters weir", mode="bm25")).hits
    assert hits and hits[0].chunk.source.endswith("notes.md")

    # A changed file is looked at again; a deleted one leaves the counts.
    (root / "archive.gz").write_bytes(b"\x1f\x8b\x08\x00" + os.urandom(900))
    assert [j.path.name for j in await run_scan(scheduler, root)] == ["archive.gz", "broken.md"]
    (root / "photo.png").unlink()
    await scheduler.process(await run_scan(scheduler, root))
    assert ".png" not in await memory.store.read(lambda r: r.skipped_files())

    # `ingest` of the folder: only skipped trouble besides the broken file, and a named
    # unsupported file is skipped too, not refused or failed.
    named = await scheduler.ingest_now(root / "libfoo.so")
    assert named.skipped == 1 and named.failed == 0 and named.skipped_types == {".so": 1}
    whole = await scheduler.ingest_now(root)
    assert whole.skipped == 4 and whole.failed == 1 and whole.as_dict()["skipped_types"]


async def test_a_skipped_file_beside_a_failing_one_in_one_batch(
    memory: AsyncMemory, tmp_path: Path
) -> None:
    root = tmp_path / "p"
    corpus(root)
    scheduler = Scheduler(memory.ingestor, PathFilter())
    report = await scheduler.process([Job(root / "tool"), Job(root / "broken.md")])
    assert report.skipped == 1 and report.failed == 1 and report.skipped_types == {"binary": 1}


async def test_api_add_file_reports_skipped(memory: AsyncMemory, tmp_path: Path) -> None:
    path = tmp_path / "x.whl"
    path.write_bytes(b"PK\x03\x04" + os.urandom(100))
    report = await memory.add_file(path)
    assert report.status == "skipped" and report.skipped_type == ".whl" and report.chunks == 0
    assert await memory.store.read(lambda r: r.errors()) == []

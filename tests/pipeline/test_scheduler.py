"""The scheduler with synthetic watcher events (watchfiles' MockRustNotify style) on a real
store with the hash embedder: debounce, reconcile, renames, folder events, failures."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.errors import EmbeddingError
from recalld.ingest import scheduler as scheduler_module
from recalld.ingest.scheduler import Job, Scheduler
from recalld.ingest.watcher import PathFilter, WatchedSource


@pytest.fixture
async def memory(isolated_home: Path) -> AsyncIterator[AsyncMemory]:
    settings = load_settings(
        None, {"RECALLD_HOME": str(isolated_home), "RECALLD_EMBED__MODEL": "hash:64"}
    ).settings
    async with await AsyncMemory.open(settings) as opened:
        yield opened


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The watched folder, away from the store under tmp_path/home."""
    path = tmp_path / "w"
    path.mkdir()
    return path


class Harness:
    """A running scheduler over one watched folder."""

    def __init__(self, memory: AsyncMemory, root: Path, **kwargs: Any) -> None:
        self.memory = memory
        self.root = root
        self.scheduler = Scheduler(memory.ingestor, PathFilter(), debounce=0.05, **kwargs)
        self.scheduler.sources = (WatchedSource(root, "auto", "config"),)
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Harness:
        self.task = asyncio.create_task(self.scheduler.run(self.stop, drain_timeout=5))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop.set()
        assert self.task is not None
        await asyncio.wait_for(self.task, 10)

    async def settle(self) -> None:
        await asyncio.wait_for(self.scheduler.wait_idle(), 10)

    async def sources(self) -> list[str]:
        docs = await self.memory.store.read(lambda c: c.documents(str(self.root)))
        return [d.source.removeprefix(f"{self.root}{os.sep}") for d in docs]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


async def test_events_for_one_path_are_debounced(memory: AsyncMemory, folder: Path) -> None:
    note = write(folder / "a.md", "Alpha note about otters.\n")
    async with Harness(memory, folder) as h:
        for _ in range(5):
            h.scheduler.notify(note, False)
        assert h.scheduler.depths()["events"] == 1
        await h.settle()
        assert h.scheduler.totals.files == 1 and h.scheduler.totals.ingested == 1


async def test_reconcile_picks_up_changes_made_while_down(
    memory: AsyncMemory, folder: Path
) -> None:
    for name in ("keep", "edit", "gone"):
        write(folder / f"{name}.md", f"The {name} note mentions herons.\n")
    async with Harness(memory, folder) as h:
        h.scheduler.scan(folder)
        await h.settle()
        assert await h.sources() == ["edit.md", "gone.md", "keep.md"]
    # "Down": edit, delete and add without events.
    write(folder / "edit.md", "The edited note now mentions storks.\n")
    os.utime(folder / "edit.md", (1, 1))
    (folder / "gone.md").unlink()
    write(folder / "new.md", "A new note about cranes.\n")
    async with Harness(memory, folder) as h:
        h.scheduler.scan(folder)
        await h.settle()
        totals = h.scheduler.totals
        # keep.md is skipped on mtime + size without being read.
        assert (totals.files, totals.ingested, totals.deleted) == (2, 2, 1)
        assert await h.sources() == ["edit.md", "keep.md", "new.md"]
        hits = await memory.search("storks", mode="bm25")
        assert [hit.chunk.source for hit in hits.hits] == [str(folder / "edit.md")]


async def test_rename_moves_the_document(memory: AsyncMemory, folder: Path) -> None:
    old = write(folder / "old.md", "Renamed notes keep their vectors: pelican.\n")
    async with Harness(memory, folder) as h:
        h.scheduler.notify(old, False)
        await h.settle()
        before = await memory.search("pelican", mode="bm25")
        new = old.rename(folder / "new.md")
        h.scheduler.notify(old, True)
        h.scheduler.notify(new, False)
        await h.settle()
        assert h.scheduler.totals.moved == 1 and h.scheduler.totals.embedded == 1
        assert await h.sources() == ["new.md"]
        after = await memory.search("pelican", mode="bm25")
        assert after.hits[0].chunk.id == before.hits[0].chunk.id


async def test_folder_events(memory: AsyncMemory, folder: Path) -> None:
    async with Harness(memory, folder) as h:
        folder = folder / "project"
        for i in range(3):
            write(folder / "deep" / f"f{i}.md", f"File {i} inside a moved-in folder: ibis.\n")
        h.scheduler.notify(folder, False)  # inotify reports only the folder
        await h.settle()
        assert len(await h.sources()) == 3
        shutil.rmtree(folder)
        h.scheduler.notify(folder, True)
        await h.settle()
        assert await h.sources() == []


async def test_bounded_queue_streams_a_big_scan(memory: AsyncMemory, folder: Path) -> None:
    for i in range(60):
        write(folder / f"d{i % 6}" / f"n{i}.md", f"Note {i} about kestrels.\n")
    async with Harness(memory, folder, queue_size=4, batch_files=3) as h:
        seen: list[int] = []
        h.scheduler.scan(folder)
        while not h.scheduler._idle.is_set():
            seen.append(h.scheduler.depths()["jobs"])
            await asyncio.sleep(0.001)
        assert max(seen) <= 4
        assert h.scheduler.totals.ingested == 60


async def test_unexpected_failure_is_isolated(
    memory: AsyncMemory, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = write(folder / "good.md", "A good file about swifts.\n")
    bad = write(folder / "bad.md", "A file that trips a bug.\n")
    real = memory.ingestor.ingest_many

    async def flaky(items: Any, **options: Any) -> Any:
        if any(source == str(bad) for source, *_ in items):
            raise RuntimeError("boom")
        return await real(items, **options)

    monkeypatch.setattr(memory.ingestor, "ingest_many", flaky)
    async with Harness(memory, folder) as h:
        h.scheduler.notify(good, False)
        h.scheduler.notify(bad, False)
        await h.settle()
        assert h.scheduler.totals.ingested == 1 and h.scheduler.totals.failed == 1
    errors = await memory.store.read(lambda r: r.errors())
    assert [(e["source"], e["type"]) for e in errors] == [(str(bad), "InternalError")]


async def test_conversations_source_takes_only_logs(memory: AsyncMemory, folder: Path) -> None:
    log = write(
        folder / "chat.jsonl",
        '{"role":"user","content":"I planted basil on the balcony."}\n'
        '{"role":"assistant","content":"Basil likes sun."}\n',
    )
    notes = write(folder / "notes.md", "Not a conversation.\n")
    async with Harness(memory, folder) as h:
        h.scheduler.sources = (WatchedSource(folder, "conversations", "runtime"),)
        h.scheduler.notify(log, False)
        h.scheduler.notify(notes, False)
        await h.settle()
        assert await h.sources() == ["chat.jsonl"]


async def test_explicit_ingest_ignores_ignore_rules(memory: AsyncMemory, folder: Path) -> None:
    odd = write(folder / ".#draft.md", "Explicitly asked for: sandpiper.\n")
    async with Harness(memory, folder) as h:
        report = await h.scheduler.ingest_now(odd)
        assert report.ingested == 1
        assert (await h.scheduler.process([Job(odd)])).files == 0  # the watcher skips it


def test_path_filter_and_ignored_names(folder: Path) -> None:
    wanted = PathFilter(excluded=[folder / "recalld.db"])
    assert wanted.wanted(str(folder / "notes" / "a.md"))
    for path in (
        ".git/config",
        "node_modules/x/index.js",
        "a/__pycache__/m.pyc",
        "a.swp",
        "b~",
        ".#c.md",
        "d.tmp",
        "recalld.db",
        "recalld.db-wal",
        ".venv/lib/x.py",
    ):
        assert not wanted.wanted(str(folder / path)), path


async def test_walk_skips_virtualenvs_and_ignored_folders(folder: Path) -> None:
    from recalld.ingest.watcher import walk

    write(folder / "keep" / "a.md", "a")
    write(folder / "env" / "pyvenv.cfg", "home = /usr")
    write(folder / "env" / "lib" / "site.py", "x = 1")
    write(folder / ".git" / "HEAD", "ref")
    write(folder / "node_modules" / "m.js", "x")
    found = [f.path.relative_to(folder).as_posix() async for f in walk(folder)]
    assert found == ["keep/a.md"]


class FlakyEmbedder:
    """Wraps the store's embedder and fails the first `failures` calls, like a dead endpoint."""

    def __init__(self, inner: Any, failures: int) -> None:
        self.inner = inner
        self.failures = failures
        self.model_id, self.dimension, self.max_tokens = (
            inner.model_id,
            inner.dimension,
            inner.max_tokens,
        )

    def embed(self, texts: list[str]) -> Any:
        if self.failures > 0:
            self.failures -= 1
            raise EmbeddingError("endpoint unavailable")
        return self.inner.embed(texts)

    def count_tokens(self, text: str) -> int:
        return int(self.inner.count_tokens(text))


async def test_embedding_failure_is_retried_until_the_file_is_stored(
    memory: AsyncMemory, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler_module, "RETRY_FIRST_S", 0.1)
    flaky = FlakyEmbedder(memory.ingestor.embedder, failures=2)
    memory.ingestor.embedder = flaky
    (folder / "a.md").write_text("# Pending\n\nThis text must survive an embedding outage.")
    async with Harness(memory, folder) as harness:
        harness.scheduler.scan(folder)
        await harness.settle()
        for _ in range(100):
            found = await memory.store.read(lambda c: c.document_by_source(str(folder / "a.md")))
            if found is not None:
                break
            await asyncio.sleep(0.05)
        assert found is not None and found.state == "complete"
        assert flaky.failures == 0
        assert harness.scheduler.depths()["retrying"] == 0
        # The outage is not an ingest error of the file.
        assert (await memory.counts())["errors"] == 0

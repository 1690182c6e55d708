"""The scheduler: from file-system events and scans to ingested documents.

    watcher ─▶ notify(path) ─▶ debounce (per path) ─┐
    scan(root) ─▶ reconcile (mtime + size) ─────────┴▶ bounded job queue ─▶ worker ─▶ Ingestor

- **Debounce**: events for one path are merged until it has been quiet for `debounce` seconds
  (at most `max_delay`, so a log that is appended to every second still gets ingested).
- **Reconcile**: a scan compares every file under a root with its stored document (mtime and
  size, then the Ingestor's content-hash skip) and removes documents whose file is gone, so
  changes made while the daemon was down are picked up. A directory event triggers a scan of
  that directory.
- **Back-pressure**: the job queue is bounded, so a scan of a 100k-file folder waits for the
  worker instead of loading the tree.
- **Batches**: the worker takes up to `batch_files` jobs at once and ingests them with one
  `Ingestor.ingest_many` call, so small files share embedding batches. A folder ingested now
  (`ingest_now`) goes in calls of `folder_files`, a few in flight.
- **Renames** arrive as a deletion and an addition; when both land in one batch and the content
  hash matches, the document is moved instead of re-embedded.
- **Failures** of one file go to the store's errors table (the Ingestor records its own) and
  never stop the pipeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from stat import S_ISREG
from typing import Any

from recalld.chunkers import unsupported_type
from recalld.config import PrivacySettings
from recalld.errors import (
    EmbeddingError,
    IngestError,
    NotFoundError,
    RecalldError,
    StoreFullError,
)
from recalld.ingest.admission import IGNORE_FILES, Admission, Scope
from recalld.ingest.overlap import InFlight, Place, WriteOrder
from recalld.ingest.pipeline import (
    SKIPPED,
    Ingestor,
    IngestReport,
    busy_file_error,
    content_hash,
    read_capped,
    read_failed,
    read_timeout_error,
    replace_error,
    too_large_error,
)
from recalld.ingest.watcher import FileState, PathFilter, WatchedSource, accepts, walk
from recalld.safe_io import NotRegularFile, call_each_with_timeout, open_regular
from recalld.storage.contract import Writer
from recalld.types import Document

logger = logging.getLogger(__name__)

# Stored documents under a root are loaded as one map for a reconcile; this bounds it.
_MAX_DOCUMENTS = 10_000_000
MAX_REPORTED_ERRORS = 20
RETRY_FIRST_S = 5.0
RETRY_MAX_S = 300.0
# While the disk is full, a probe write of a megabyte is tried this often; the files waiting
# for space are queued again as soon as one succeeds.
SPACE_PROBE_S = 5.0
SPACE_PROBE_BYTES = 2**20
# Files per `ingest_many` call in `ingest_now` (`bench ingest` makes its API calls this size).
FOLDER_FILES = 32


@dataclass(frozen=True, slots=True)
class Job:
    """A path to bring in line with the store: ingest it, or remove it when `deleted`."""

    path: Path
    deleted: bool = False
    # The watched folder whose scan queued it: dropped if that folder is no longer watched.
    root: Path | None = None


@dataclass(slots=True)
class BatchReport:
    """What a run of jobs did; `errors` holds the first few failures."""

    files: int = 0
    ingested: int = 0
    unchanged: int = 0
    empty: int = 0
    failed: int = 0
    deleted: int = 0
    moved: int = 0
    chunks: int = 0
    embedded: int = 0
    retrying: int = 0  # embedding failed or the disk is full; the file is retried later
    refused: int = 0  # named explicitly but kept out (the secret deny-list)
    skipped: int = 0  # no chunker takes them: not errors, not retried until they change
    skipped_types: dict[str, int] = field(default_factory=dict)  # by file type
    unreadable: int = 0  # chunks left out as unreadable text (chunkers.garbage, issue 17)
    errors: list[dict[str, Any]] = field(default_factory=list)

    def add(self, other: BatchReport) -> None:
        """Add another report's counts to this one."""
        for name in (
            "files",
            "ingested",
            "unchanged",
            "empty",
            "failed",
            "deleted",
            "moved",
            "chunks",
            "embedded",
            "retrying",
            "refused",
            "skipped",
            "unreadable",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for file_type, count in other.skipped_types.items():
            self.note_skipped(file_type, count)
        room = MAX_REPORTED_ERRORS - len(self.errors)
        self.errors.extend(other.errors[: max(0, room)])

    def note_skipped(self, file_type: str, count: int = 1) -> None:
        """Count files of a type no chunker takes (`skipped` counts them too, via `add`)."""
        self.skipped_types[file_type] = self.skipped_types.get(file_type, 0) + count

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        out = {name: getattr(self, name) for name in self.__slots__}
        out["skipped_types"] = dict(self.skipped_types)
        return out


@dataclass(frozen=True, slots=True)
class _Skip:
    """A file no chunker takes, known by its name: recorded as skipped without being read."""

    path: Path
    source: str
    file_type: str
    mtime: float
    size: int


@dataclass(frozen=True, slots=True)
class _Read:
    path: Path
    source: str
    data: bytes
    mtime: float
    size: int


def _name_error(path: Path) -> IngestError | None:
    """Refuse a file name that is not valid UTF-8: the store and the protocol are UTF-8, so it
    could be neither stored nor shown (it is reported with the bad bytes escaped)."""
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(path).decode("utf-8", "backslashreplace")
        return IngestError(
            f"{shown}: the file name is not valid UTF-8; rename the file to ingest it",
            data={"path": shown, "reason": "file name is not UTF-8"},
        )
    return None


def _read(path: Path, max_bytes: int) -> _Read | _Skip | FileState | None:
    """Read a file for ingest; None when it is gone, its `FileState` when it is a folder, a
    `_Skip` (unread) when no chunker takes its type."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    if path.is_dir():
        return FileState(path, stat.st_mtime, -1)
    if not S_ISREG(stat.st_mode):
        # Opening a FIFO would block the worker until someone writes to it; a device may
        # never end (issue 6).
        raise IngestError(
            f"{path} is not a regular file (a pipe, socket or device); it is not ingested",
            data={"path": str(path), "reason": "not a regular file"},
        )
    if (file_type := unsupported_type(path.name)) is not None:
        return _Skip(path, os.fspath(path), file_type, stat.st_mtime, stat.st_size)
    if stat.st_size > max_bytes:
        raise too_large_error(path, stat.st_size, max_bytes)
    try:
        handle = open_regular(path)
    except BlockingIOError:
        raise busy_file_error(path) from None
    except NotRegularFile:
        raise IngestError(  # replaced by one between the stat and the open
            f"{path} is not a regular file (a pipe, socket or device); it is not ingested",
            data={"path": str(path), "reason": "not a regular file"},
        ) from None
    with handle:
        data = read_capped(handle, path, max_bytes)
    return _Read(path, os.fspath(path), data, stat.st_mtime, stat.st_size)


def _unchanged(doc: Document | None, mtime: float, size: int) -> bool:
    return (
        doc is not None
        and doc.state == "complete"
        and doc.size == size
        and doc.mtime is not None
        and abs(doc.mtime - mtime) < 1e-6
    )


async def _claim_space(conn: Writer) -> None:
    # Committed, so SQLite must find the pages on disk (a rolled-back write never does).
    await conn.execute(
        "INSERT OR REPLACE INTO meta (key, value) VALUES ('space_probe', zeroblob(?))",
        (SPACE_PROBE_BYTES,),
    )


async def _release_space(conn: Writer) -> None:
    await conn.execute("DELETE FROM meta WHERE key = 'space_probe'")


class Scheduler:
    """Debounces changes, reconciles folders and feeds the Ingestor from a bounded queue.

    Args:
        ingestor: The pipeline that chunks, embeds and writes.
        wanted: Which paths may be ingested.
        debounce: Seconds a path must stay quiet before it is processed.
        max_delay: Longest a busy path waits.
        queue_size: Bound of the job queue.
        batch_files: Files ingested together (sharing embedding batches).
        folder_files: Files per call when a folder is ingested now: more than `batch_files`,
            which keeps a watcher's changes prompt, since each call costs a transaction,
            model calls and progress events of its own.
        admission: Ignore files, excludes, the deny-list and the symlink rule; default: the
            default `privacy` settings, symlinks kept inside the watched folders.
    """

    def __init__(
        self,
        ingestor: Ingestor,
        wanted: PathFilter,
        *,
        admission: Admission | None = None,
        debounce: float = 0.3,
        max_delay: float = 5.0,
        queue_size: int = 1024,
        batch_files: int = 16,
        folder_files: int = FOLDER_FILES,
    ) -> None:
        self.ingestor = ingestor
        self.wanted = wanted
        self.debounce = debounce
        self.max_delay = max_delay
        self.batch_files = batch_files
        self.folder_files = folder_files
        self.sources: tuple[WatchedSource, ...] = ()
        self.admission = admission or Admission(
            PrivacySettings(), roots=lambda: [s.path for s in self.sources]
        )
        self.totals = BatchReport()
        self.last_scan: dict[Path, float] = {}  # root -> unix time its last scan finished
        self._pending: dict[Path, tuple[bool, float, float]] = {}
        self._wake = asyncio.Event()
        self._jobs: asyncio.Queue[Job] = asyncio.Queue(queue_size)
        self._scans: asyncio.Queue[Path] = asyncio.Queue()
        self._scanning = 0
        self._in_flight = 0
        # Files that failed, by (mtime, size): not retried on every event or scan until they
        # change, so an unreadable file is reported once, not in a loop.
        self._failed: dict[str, tuple[float, int]] = {}
        self._queued: set[Path] = set()
        # Files whose embedding failed (endpoint down): retried with back-off, never dropped.
        self._retry_delay: dict[Path, float] = {}
        self._retry_timers: dict[Path, asyncio.TimerHandle] = {}
        # Files a full disk kept out: pending until a write succeeds again, never dropped.
        self._no_space: set[Path] = set()
        self._no_space_wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    # -- feeding ---------------------------------------------------------------------------

    def notify(self, path: Path, deleted: bool) -> None:
        """Record a change; it is processed once the path has been quiet for `debounce`."""
        now = time.monotonic()
        first = self._pending[path][2] if path in self._pending else now
        self._pending[path] = (deleted, min(now + self.debounce, first + self.max_delay), first)
        self._idle.clear()
        self._wake.set()

    def scan(self, root: Path) -> None:
        """Reconcile everything under `root` (a folder or a file in a watched source) with the
        store; a root no source holds by the time its turn comes is skipped."""
        self._scans.put_nowait(root)
        self._idle.clear()

    def source_for(self, path: Path) -> WatchedSource | None:
        """The watched source that holds `path` (the deepest one), if any."""
        best: WatchedSource | None = None
        for source in self.sources:
            if path == source.path or source.path in path.parents:
                if best is None or len(source.path.parts) > len(best.path.parts):
                    best = source
        return best

    def scope_for(self, path: Path) -> Scope | None:
        """The admission rules of the watched source that holds `path`, if any."""
        source = self.source_for(path)
        if source is None:
            return None
        return self.admission.scope(source.path, source.exclude)

    # -- state -----------------------------------------------------------------------------

    def depths(self) -> dict[str, int]:
        """Queue depths for `status`: debouncing events, queued jobs, scans, files in work."""
        return {
            "events": len(self._pending),
            "jobs": self._jobs.qsize(),
            "scans": self._scans.qsize() + self._scanning,
            "in_flight": self._in_flight,
            "retrying": len(self._retry_timers),
            "no_space": len(self._no_space),
        }

    @property
    def pending(self) -> int:
        """Everything in work or waiting for it (files waiting to retry embedding excluded)."""
        return sum(v for k, v in self.depths().items() if k != "retrying")

    def _retry_later(self, path: Path) -> None:
        """Try a file again after an embedding failure, backing off up to five minutes."""
        delay = min(self._retry_delay.get(path, RETRY_FIRST_S / 2) * 2, RETRY_MAX_S)
        self._retry_delay[path] = delay
        logger.warning("embedding failed for %s; retrying in %.0f s", path, delay)
        if old := self._retry_timers.pop(path, None):
            old.cancel()

        def fire() -> None:
            self._retry_timers.pop(path, None)
            self.notify(path, deleted=False)

        self._retry_timers[path] = asyncio.get_running_loop().call_later(delay, fire)

    def _wait_for_space(self, path: Path) -> None:
        """Keep a file the full disk refused; it is queued again once writes succeed."""
        if not self._no_space:
            logger.warning("the disk is full: files wait for space, none is dropped")
        self._no_space.add(path)
        self._no_space_wake.set()

    async def _space_loop(self) -> None:
        while True:
            await self._no_space_wake.wait()
            await asyncio.sleep(SPACE_PROBE_S)
            try:
                # Room for a megabyte: a tiny probe would fit where no document does, and
                # every waiting file would be read and embedded again only to fail.
                await self.ingestor.store.write(_claim_space)
                await self.ingestor.store.write(_release_space)
            except StoreFullError:
                continue
            paths, self._no_space = self._no_space, set()
            self._no_space_wake.clear()
            logger.info("the disk has space again: ingesting %d files that waited", len(paths))
            for path in paths:
                self.notify(path, deleted=False)

    async def wait_idle(self) -> None:
        """Wait until nothing is pending."""
        await self._idle.wait()

    def _check_idle(self) -> None:
        if self.pending == 0:
            self._idle.set()

    # -- running ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, drain_timeout: float = 10.0) -> None:
        """Run the debouncer, the scanner and the worker until `stop` is set, then drain.

        Draining processes what is queued for at most `drain_timeout` seconds; whatever is
        left is found again by the start-up reconcile.
        """
        async with asyncio.TaskGroup() as group:
            loops = [
                group.create_task(self._debounce_loop(), name="recalld-debounce"),
                group.create_task(self._scan_loop(), name="recalld-scan"),
                group.create_task(self._work_loop(), name="recalld-ingest"),
                group.create_task(self._space_loop(), name="recalld-space"),
            ]
            await stop.wait()
            loops[1].cancel()  # an unfinished scan is redone at the next start
            for timer in self._retry_timers.values():
                timer.cancel()  # files waiting to retry are found again at the next start
            self._retry_timers.clear()
            self._no_space.clear()  # not stored, so the next start's reconcile finds them
            for path, (deleted, _, _) in list(self._pending.items()):
                self._pending.pop(path, None)
                with contextlib.suppress(asyncio.QueueFull):
                    self._jobs.put_nowait(Job(path, deleted))
            left = self._jobs.qsize() + self._in_flight
            if left:
                logger.info("draining %d queued files (up to %g s)", left, drain_timeout)
            try:
                async with asyncio.timeout(drain_timeout):
                    await self._jobs.join()
            except TimeoutError:
                logger.warning(
                    "stopped with %d files still queued; they are picked up at the next start",
                    self._jobs.qsize() + self._in_flight,
                )
            for task in loops:
                task.cancel()

    async def _debounce_loop(self) -> None:
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
                continue
            now = time.monotonic()
            due = [p for p, (_, at, _) in self._pending.items() if at <= now]
            if not due:
                await asyncio.sleep(min(at for _, at, _ in self._pending.values()) - now)
                continue
            for path in due:
                # Take the job out of `_pending` only once the queue has room, so `depths`
                # always counts it somewhere.
                deleted = self._pending[path][0]
                await self._enqueue(Job(path, deleted), force=True)
                self._pending.pop(path, None)

    async def _scan_loop(self) -> None:
        while True:
            root = await self._scans.get()
            if self.source_for(root) is None:
                # Scans are of watched folders; this one was removed since it was queued.
                logger.info("not reconciling %s: it is not watched", root)
                self._check_idle()
                continue
            self._scanning += 1
            try:
                await self.reconcile(root, self._enqueue)
            except Exception:
                logger.exception("scan of %s failed", root)
            finally:
                self._scanning -= 1
                self._check_idle()

    async def reconcile(self, root: Path, put: Callable[[Job], Awaitable[None]]) -> int:
        """Queue every file under `root` that differs from the store, and every stored
        document whose file is gone. Returns the number of jobs queued."""
        started = time.monotonic()
        source = self.source_for(root)
        kind = source.kind if source else "auto"
        prefix = os.fspath(root)
        stored: dict[str, tuple[float | None, int | None, str]] = {}
        for doc in await self.ingestor.store.read(lambda c: c.documents(prefix, _MAX_DOCUMENTS)):
            if doc.source == prefix or doc.source.startswith(prefix.rstrip(os.sep) + os.sep):
                stored[doc.source] = (doc.mtime, doc.size, doc.state)
        queued = seen = 0
        timeout = self.ingestor.read_timeout_s
        async for state in walk(root, self.wanted, self.scope_for(root), timeout):
            if source is not None and self.source_for(root) is None:
                # `sources remove` took the folder away: stop, and queue nothing more of it.
                logger.info("stopped reconciling %s: it is no longer watched", root)
                return queued
            seen += 1
            key = os.fspath(state.path)
            known = stored.pop(key, None)
            if not accepts(kind, state.path):
                continue
            if (
                known is not None
                and known[2] == "complete"
                and known[1] == state.size
                and (known[0] is not None and abs(known[0] - state.mtime) < 1e-6)
            ):
                continue
            await put(Job(state.path, root=root if source else None))
            queued += 1
        if source is not None and self.source_for(root) is None:
            return queued
        for gone in stored:
            await put(Job(Path(gone), deleted=True, root=root if source else None))
            queued += 1
        self.last_scan[root] = time.time()
        logger.info(
            "reconciled %s: %d files, %d to update (%.1f s)",
            root,
            seen,
            queued,
            time.monotonic() - started,
        )
        return queued

    async def _enqueue(self, job: Job, force: bool = False) -> None:
        # A scan skips files already waiting in the queue (a rescan while the first scan's
        # files are still queued would ingest them twice); watcher events always go in.
        if job.path in self._queued and not force:
            return
        self._queued.add(job.path)
        await self._jobs.put(job)

    async def _work_loop(self) -> None:
        while True:
            batch = [await self._jobs.get()]
            while len(batch) < self.batch_files and not self._jobs.empty():
                batch.append(self._jobs.get_nowait())
            for job in batch:
                self._queued.discard(job.path)
            self._in_flight = len(batch)
            try:
                report = await self.process(batch)
                self.totals.add(report)
            except StoreFullError:
                # A deletion, a move or an error record found no space: the whole batch waits.
                for job in batch:
                    self._wait_for_space(job.path)
            except Exception:
                # process() already isolates files; this is a bug, not a bad file.
                logger.exception("ingest batch of %d files failed", len(batch))
            finally:
                self._in_flight = 0
                for _ in batch:
                    self._jobs.task_done()
                self._check_idle()

    # -- processing ------------------------------------------------------------------------

    async def ingest_now(
        self,
        root: Path,
        progress: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
        *,
        exclude: Sequence[str] = (),
        allow_secrets: bool = False,
    ) -> BatchReport:
        """Ingest a file or every file under a folder now, whether watched or not.

        Args:
            root: A file (ingested even if the ignore rules would skip it) or a folder (its
                ignore files, the excludes and the symlink rule apply).
            progress: Awaited before each batch with `{"current"}` (its first file) and after
                it with `{"done", "total", "path", "chunks", "embedded", "failed"}`.
            exclude: More gitignore-style patterns, relative to a folder `root`.
            allow_secrets: Let in files on the secret deny-list.

        Raises:
            NotFoundError: `root` does not exist.
        """
        # Anything but a folder is one job: a FIFO or device named here is refused by the
        # read, with its reason, not walked as if it were a folder.
        exists, is_file = await asyncio.to_thread(lambda: (root.exists(), not root.is_dir()))
        if not exists:
            raise NotFoundError(f"{root} does not exist", data={"path": str(root)})
        scope = self.admission.scope(root, exclude, allow_secrets=allow_secrets)
        if is_file:
            total = 1
        else:
            total = 0
            async for _ in walk(root, self.wanted, scope, self.ingestor.read_timeout_s):
                total += 1
        report = BatchReport()
        batch: list[Job] = []
        order = WriteOrder()  # documents are written in walk order, as one batch at a time did

        async def one(jobs: list[Job]) -> tuple[list[Job], BatchReport]:
            place = order.place()  # before any await: batches take places in walk order
            try:
                if progress is not None:
                    # The batch's first file, so that a slow one shows while it is worked on.
                    await progress({"current": os.fspath(jobs[0].path), "total": total})
                done = await self.process(
                    jobs, explicit=True, allow_secrets=allow_secrets, place=place
                )
            finally:
                place.leave()
            return jobs, done

        async def finished(done: list[tuple[list[Job], BatchReport]]) -> None:
            for jobs, part in done:
                report.add(part)
                if progress is not None:
                    await progress(
                        {
                            "done": report.files,
                            "total": max(total, report.files),
                            "path": os.fspath(jobs[-1].path),
                            "chunks": report.chunks,
                            "embedded": report.embedded,
                            "failed": report.failed,
                        }
                    )

        # A few batches at once: the next files are read and chunked, and the last written,
        # while the model embeds (`ingest.overlap`); each batch keeps its own model batches.
        # A folder ingested into a store with no vectors yet is a bulk load (PostgreSQL builds
        # its vector index once at the end); otherwise the block changes nothing.
        bulk = contextlib.nullcontext() if is_file else self.ingestor.store.bulk_load()
        async with bulk, InFlight[tuple[list[Job], BatchReport]]() as flight:
            if is_file:
                batch.append(Job(root))
            else:
                async for state in walk(root, self.wanted, scope, self.ingestor.read_timeout_s):
                    batch.append(Job(state.path))
                    if len(batch) >= self.folder_files:
                        await finished(await flight.add(one(batch)))
                        batch = []
            if batch:
                await finished(await flight.add(one(batch)))
            await finished(await flight.drain())
        logger.info(
            "ingested %s: %d files, %d chunks (%d embedded), %d failed",
            root,
            report.files,
            report.chunks,
            report.embedded,
            report.failed,
        )
        return report

    async def process(
        self,
        jobs: Iterable[Job],
        *,
        explicit: bool = False,
        allow_secrets: bool = False,
        place: Place | None = None,
    ) -> BatchReport:
        """Bring each job's path in line with the store.

        Args:
            jobs: Paths to ingest, or to remove when they no longer exist.
            explicit: Asked for by a client: skip the ignore rules and source kinds, and do not
                follow folders (a watcher event on a folder queues a scan of it instead).
                The deny-list of secret-bearing files still applies.
            allow_secrets: Let in files on the deny-list too.
            place: Where the batch's documents are written among overlapping batches
                (`Ingestor.ingest_many`).
        """
        report = BatchReport()
        latest: dict[Path, Job] = {}
        for job in jobs:
            if job.root is not None and self.source_for(job.root) is None:
                continue  # queued by the scan of a folder removed since
            latest[job.path] = job
        reads: list[_Read] = []
        gone: list[str] = []
        to_read: list[tuple[Path, WatchedSource | None]] = []
        for path in latest:
            if (bad_name := _name_error(path)) is not None:
                await self._fail(report, bad_name.data["path"], bad_name)
                continue
            source = None if explicit else self.source_for(path)
            if source is not None and not accepts(source.kind, path):
                continue
            to_read.append((path, source))
        # The batch's files in one trip to a reader thread, each with its own deadline.
        timeout = self.ingestor.read_timeout_s
        outcomes = await call_each_with_timeout(
            [
                partial(self._admit_and_read, path, source, allow_secrets)
                for path, source in to_read
            ],
            timeout,
        )
        for (path, source), outcome in zip(to_read, outcomes, strict=True):
            if isinstance(outcome, TimeoutError):
                await self._fail(report, os.fspath(path), read_timeout_error(path, timeout))
                continue
            if isinstance(outcome, (OSError, IngestError)):
                # Not rescanned for its rules even if it is an ignore file: a FIFO named
                # .gitignore is listed again by that scan, which would loop.
                await self._fail(report, os.fspath(path), outcome)
                continue
            if isinstance(outcome, BaseException):
                raise outcome
            refusal, found = outcome
            if source is not None and path.name in IGNORE_FILES:
                self.scan(path.parent)  # what its rules now let in or keep out
            if refusal is not None:
                if explicit:
                    await self._refuse(report, os.fspath(path), refusal)
                else:
                    # What is now kept out leaves the store (a folder: all it holds).
                    gone.append(os.fspath(path))
                continue
            if found is None:
                gone.append(os.fspath(path))
            elif isinstance(found, _Skip):
                await self._skip(found, report)
            elif isinstance(found, FileState):
                if not explicit:
                    self.scan(path)  # a folder appeared or changed: reconcile it
            elif explicit or self.wanted.wanted(found.source):
                reads.append(found)
        await self._remove(gone, reads, report)
        if reads:
            await self._ingest(reads, report, explicit, allow_secrets, place)
        return report

    def _admit_and_read(
        self, path: Path, source: WatchedSource | None, allow_secrets: bool
    ) -> tuple[str | None, _Read | _Skip | FileState | None]:
        """Why `path` may not enter, or else what it holds (blocking: both read files, which a
        hung mount can block, so they run together under one deadline)."""
        refusal = self._refusal(path, source, allow_secrets)
        if refusal is not None:
            return refusal, None
        return None, _read(path, self.ingestor.max_file_bytes)

    async def _skip(self, item: _Skip, report: BatchReport) -> None:
        """Record a file no chunker takes, once per version of it (issue 16)."""
        report.files += 1
        doc = await self._document(item.source)
        if not _unchanged(doc, item.mtime, item.size) or (doc and doc.kind != SKIPPED):
            await self.ingestor.skip(item.source, item.file_type, item.mtime, item.size)
        report.skipped += 1
        report.note_skipped(item.file_type)
        self._failed.pop(item.source, None)

    def _refusal(self, path: Path, source: WatchedSource | None, allow_secrets: bool) -> str | None:
        """Why a changed or named path may not enter (blocking)."""
        if source is None:
            return self.admission.explicit_refusal(path, allow_secrets=allow_secrets)
        return self.admission.scope(source.path, source.exclude).path_refusal(path)

    async def _refuse(self, report: BatchReport, source: str, reason: str) -> None:
        logger.info("not ingesting %s: %s", source, reason)
        report.files += 1
        report.refused += 1
        if len(report.errors) < MAX_REPORTED_ERRORS:
            report.errors.append({"path": source, "type": "Refused", "message": reason})

    async def _remove(self, gone: list[str], reads: list[_Read], report: BatchReport) -> None:
        if not gone:
            return
        # A rename is a deletion plus an addition with the same content: move the document.
        by_hash: dict[str, _Read] = {}
        for item in reads:
            by_hash.setdefault(content_hash(item.data), item)
        for source in gone:
            doc = await self._document(source)
            target = by_hash.pop(doc.content_hash, None) if doc is not None else None
            if target is not None:
                existing = await self._document(target.source)
                if existing is None:
                    await self._move(source, target.source)
                    logger.info("moved %s to %s", source, target.source)
                    report.moved += 1
                    continue
            if doc is not None and await self.ingestor.forget(source):
                logger.info("removed %s", source)
                report.deleted += 1
            # A deleted folder: everything stored under it goes too.
            inside = await self._documents_under(source + os.sep)
            for child in inside:
                if await self.ingestor.forget(child.source):
                    report.deleted += 1
            if inside:
                logger.info("removed %d documents under %s", len(inside), source)

    async def _ingest(
        self,
        reads: list[_Read],
        report: BatchReport,
        explicit: bool = False,
        allow_secrets: bool = False,
        place: Place | None = None,
    ) -> None:
        todo: list[_Read] = []
        stored = await self.ingestor.store.read(
            lambda c: c.documents_by_source([item.source for item in reads])
        )
        for item in reads:
            doc = stored.get(item.source)
            report.files += 1
            if _unchanged(doc, item.mtime, item.size) and doc and doc.kind == SKIPPED:
                report.skipped += 1
                report.note_skipped(doc.content_hash.partition(":")[2])  # "skipped:<type>"
            elif _unchanged(doc, item.mtime, item.size):
                report.unchanged += 1
                report.chunks += doc.chunk_count if doc else 0
            elif not explicit and self._failed.get(item.source) == (item.mtime, item.size):
                report.failed += 1
            else:
                todo.append(item)
        if not todo:
            return
        items = [(r.source, r.path.name, r.data, r.mtime, r.size) for r in todo]
        try:
            results = await self.ingestor.ingest_many(items, redact=not allow_secrets, place=place)
            for result in results:
                self._count(report, result)
                self._failed.pop(result.source, None)
            for item in todo:
                self._retry_delay.pop(item.path, None)
        except RecalldError as exc:
            # The Ingestor ingested the others and recorded every failure; find out which.
            for item in todo:
                doc = await self._document(item.source)
                if (
                    doc is not None
                    and doc.kind == SKIPPED
                    and _unchanged(doc, item.mtime, item.size)
                ):
                    report.skipped += 1
                    report.note_skipped(doc.content_hash.partition(":")[2])
                    self._failed.pop(item.source, None)
                elif doc is not None and doc.content_hash == content_hash(item.data):
                    report.ingested += 1
                    report.chunks += doc.chunk_count
                    self._failed.pop(item.source, None)
                    self._retry_delay.pop(item.path, None)
                elif isinstance(exc, EmbeddingError):
                    report.retrying += 1
                    self._retry_later(item.path)
                elif isinstance(exc, StoreFullError):
                    report.retrying += 1
                    self._wait_for_space(item.path)
                else:
                    self._failed[item.source] = (item.mtime, item.size)
                    await self._note_failure(report, item.source)
        except Exception:
            if len(todo) == 1:
                logger.exception("unexpected failure ingesting %s", todo[0].source)
                self._failed[todo[0].source] = (todo[0].mtime, todo[0].size)
                await self._fail(report, todo[0].source, None)
                return
            # Isolate the file that broke the batch.
            for item in todo:
                single = BatchReport()
                await self._ingest([item], single, explicit, allow_secrets)
                single.files -= 1
                report.add(single)

    async def _document(self, source: str) -> Document | None:
        return await self.ingestor.store.read(lambda c: c.document_by_source(source))

    async def _documents_under(self, prefix: str) -> list[Document]:
        return await self.ingestor.store.read(lambda c: c.documents(prefix, _MAX_DOCUMENTS))

    async def _move(self, old: str, new: str) -> bool:
        return await self.ingestor.store.write(lambda c: c.move_document(old, new))

    def _count(self, report: BatchReport, result: IngestReport) -> None:
        report.chunks += result.chunks
        report.embedded += result.embedded
        report.unreadable += result.unreadable
        if result.status == "skipped":
            report.skipped += 1
            report.note_skipped(result.skipped_type)
        elif result.status == "unchanged":
            report.unchanged += 1
        elif result.status == "empty":
            report.empty += 1
        else:
            report.ingested += 1

    async def _note_failure(self, report: BatchReport, source: str) -> None:
        report.failed += 1
        if len(report.errors) < MAX_REPORTED_ERRORS:
            rows = await self.ingestor.store.read(lambda c: c.errors(50))
            match = next((r for r in rows if r["source"] == source), None)
            report.errors.append(
                {
                    "path": source,
                    "type": match["type"] if match else "Error",
                    "message": match["message"] if match else "not ingested",
                }
            )

    async def _fail(self, report: BatchReport, source: str, exc: BaseException | None) -> None:
        if isinstance(exc, RecalldError):
            kind, message = type(exc).__name__, exc.message
        elif isinstance(exc, OSError):
            kind, message = "IngestError", f"cannot read {source}: {exc.strerror or exc}"
        else:
            kind, message = "InternalError", "unexpected failure; see the daemon log"
        if exc is not None:
            logger.warning("cannot ingest %s: %s", source, message)
        report.files += 1
        report.failed += 1
        if len(report.errors) < MAX_REPORTED_ERRORS:
            report.errors.append({"path": source, "type": kind, "message": message})
        # An unexpected failure (exc None) or a failed read keeps the last good version.
        keep = exc is None or read_failed(exc)
        await self.ingestor.store.write(
            lambda c: replace_error(c, source, kind, message, keep_stored=keep)
        )

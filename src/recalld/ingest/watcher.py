"""Watching source folders: which files count, walking a tree, and `awatch` over every root.

The watcher only reports; the scheduler (`recalld.ingest.scheduler`) decides what to do. Each
change arrives as a path and a flag saying whether it was deleted: added and modified are
treated alike, because inotify reports a file created inside a new directory as `modified` and
an editor's atomic save as `added` (watchfiles' own advice), and the scheduler stats the path
when it processes it anyway.

Ignored everywhere: VCS and tool folders (`.git`, `node_modules`, `__pycache__`, caches),
virtualenvs (any folder holding a `pyvenv.cfg`), editor temporary files (`*.swp`, `*~`, `.#*`,
`*.tmp`, ...), and the store's own files.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fnmatch
import logging
import os
import re
import stat as stat_module
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import watchfiles

from recalld.ingest.admission import Rules, Scope
from recalld.safe_io import call_with_timeout

logger = logging.getLogger(__name__)

LIST_TIMEOUT_S = 30.0

IGNORED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".bzr",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
        ".idea",
        ".cache",
        ".eggs",
        "site-packages",
    }
)
IGNORED_FILES = (
    "*.swp",
    "*.swo",
    "*.swx",
    "*~",
    ".#*",
    "#*#",
    "*.tmp",
    "*.temp",
    "*.part",
    "*.crdownload",
    "*.py[cod]",
    ".DS_Store",
    "Thumbs.db",
    "4913",
    "*.___jb_*___",
    "*.lock",
)
_IGNORED_FILES_RE = re.compile("|".join(fnmatch.translate(p) for p in IGNORED_FILES))

RESTART_MAX_S = 30.0  # the longest wait before a failed watcher is started again
RESCAN_AFTER_S = 1.0  # time for a restarted watcher to set up before the folders are rescanned

# What each source kind takes in; `auto` lets the chunkers pick by extension and shape.
SOURCE_KINDS = ("auto", "documents", "code", "conversations")
_CONVERSATION_SUFFIXES = frozenset({".json", ".jsonl", ".ndjson"})


@dataclass(frozen=True, slots=True)
class WatchedSource:
    """A folder recalld keeps in sync.

    Attributes:
        path: The folder, absolute and resolved.
        kind: One of `SOURCE_KINDS`; `conversations` only takes JSON and JSONL logs.
        origin: `config` (daemon.watch), `runtime` (added over the socket) or `drop`.
        exclude: The source's own exclude patterns (`sources add --exclude`).
    """

    path: Path
    kind: str = "auto"
    origin: str = "runtime"
    exclude: tuple[str, ...] = ()  # gitignore-style patterns, relative to `path`


@dataclass(frozen=True, slots=True)
class FileState:
    """A file found by a scan, with what is needed to skip it cheaply."""

    path: Path
    mtime: float
    size: int


def is_ignored_name(name: str, *, is_dir: bool) -> bool:
    """True for a folder or file name that is never ingested."""
    if is_dir:
        return name in IGNORED_DIRS
    return _IGNORED_FILES_RE.match(name) is not None


def accepts(kind: str, path: Path) -> bool:
    """Whether a source of `kind` takes this file."""
    if kind == "conversations":
        return path.suffix.lower() in _CONVERSATION_SUFFIXES
    return True


class PathFilter:
    """Decides which paths count, as a `watchfiles` filter and for scans.

    Args:
        excluded: Files and folders never ingested (the store and its WAL, the lock file).
    """

    def __init__(self, excluded: Iterable[Path] = ()) -> None:
        self.excluded = frozenset(os.fspath(p) for p in excluded)

    def __call__(self, change: watchfiles.Change, path: str) -> bool:
        return self.wanted(path)

    def wanted(self, path: str) -> bool:
        """True when `path` may be ingested: no ignored part, not an excluded file."""
        if path in self.excluded or any(path.startswith(e + "-") for e in self.excluded):
            return False
        parts = Path(path).parts
        if any(part in IGNORED_DIRS for part in parts[:-1]):
            return False
        return not is_ignored_name(parts[-1], is_dir=False) if parts else False


def _list_dir(
    folder: Path, wanted: PathFilter, scope: Scope | None, inherited: Rules
) -> tuple[list[FileState], list[tuple[Path, Rules]]]:
    files: list[FileState] = []
    folders: list[tuple[Path, Rules]] = []
    try:
        entries = list(os.scandir(folder))
    except OSError as exc:
        logger.warning("cannot list %s: %s", folder, exc.strerror or exc)
        return files, folders
    if any(e.name == "pyvenv.cfg" for e in entries):
        return files, folders  # a virtualenv
    rules = scope.rules_in(folder, inherited) if scope is not None else ()
    for entry in entries:
        try:
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                if not is_ignored_name(entry.name, is_dir=True) and (
                    scope is None or scope.refusal(path, rules, is_dir=True) is None
                ):
                    folders.append((path, rules))
            elif is_ignored_name(entry.name, is_dir=False) or not wanted.wanted(entry.path):
                continue
            elif scope is not None and (
                scope.refusal(path, rules, is_dir=False) is not None
                or (entry.is_symlink() and scope.symlink_refusal(path) is not None)
            ):
                continue
            elif _regular_file(entry):
                stat = entry.stat()
                files.append(FileState(path, stat.st_mtime, stat.st_size))
            elif _never_readable(entry):
                # Listed so that the scheduler records why it is skipped (issue 6).
                stat = entry.stat(follow_symlinks=False)
                files.append(FileState(path, stat.st_mtime, stat.st_size))
        except OSError:
            continue  # vanished while listing; its event follows
    return files, folders


def _regular_file(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file(follow_symlinks=True)
    except OSError:
        return False  # a symlink loop raises here


def _never_readable(entry: os.DirEntry[str]) -> bool:
    """A pipe, socket or device, or a symlink that loops. A symlink to a folder (not followed)
    or to nothing is simply passed over."""
    try:
        target = os.stat(entry.path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return not stat_module.S_ISDIR(target.st_mode)


async def walk(
    root: Path,
    wanted: PathFilter | None = None,
    scope: Scope | None = None,
    limit_s: float = LIST_TIMEOUT_S,
) -> AsyncIterator[FileState]:
    """Every wanted file under `root`, one folder listing at a time in a worker thread.

    With a `scope`, its admission rules apply too (ignore files, excludes, deny-list,
    symlinks). Streams: a folder of 100k files is never held in memory as a whole. A folder
    whose listing (or ignore files) takes over `limit_s`, a hung mount, is skipped.
    """
    wanted = wanted or PathFilter()
    if await asyncio.to_thread(root.is_file):
        if wanted.wanted(os.fspath(root)) and (
            scope is None or await asyncio.to_thread(scope.path_refusal, root) is None
        ):
            stat = await asyncio.to_thread(root.stat)
            yield FileState(root, stat.st_mtime, stat.st_size)
        return
    start = await asyncio.to_thread(scope.start, root) if scope is not None else ()
    if start is None:
        return  # the folder itself is ignored
    stack: list[tuple[Path, Rules]] = [(root, start)]
    while stack:
        folder, rules = stack.pop()
        try:
            files, folders = await call_with_timeout(
                partial(_list_dir, folder, wanted, scope, rules), limit_s
            )
        except TimeoutError:
            logger.warning("listing %s took longer than %g s; skipped", folder, limit_s)
            continue
        for state in sorted(files, key=lambda f: f.path):
            yield state
        stack.extend(sorted(folders, key=lambda f: f[0], reverse=True))


Sink = Callable[[Path, bool], None]


class Watcher:
    """`watchfiles.awatch` over every watched root, feeding `sink(path, deleted)`.

    Args:
        sink: Called for every wanted change; `deleted` is True for a deletion.
        wanted: The path filter.
        debounce_ms: watchfiles' own grouping delay; the scheduler debounces again per path.
    """

    def __init__(self, sink: Sink, wanted: PathFilter, debounce_ms: int = 200) -> None:
        self.sink = sink
        self.wanted = wanted
        self.debounce_ms = debounce_ms
        self.roots: tuple[Path, ...] = ()

    async def run(self, roots: Sequence[Path], stop: asyncio.Event) -> None:
        """Watch `roots` until `stop` is set. Roots that do not exist are skipped.

        A watcher that fails is restarted, with back-off, and every root is reported changed so
        the scheduler rescans what the failure may have swallowed: watchfiles' Rust side gives
        up on a file name that is not valid UTF-8 (`WatchfilesRustInternalError`), and one such
        file must not stop the daemon (issue 6).
        """
        self.roots = tuple(r for r in roots if r.is_dir())
        missing = [r for r in roots if not r.is_dir()]
        for root in missing:
            logger.warning("not watching %s: it is not a folder", root)
        if not self.roots:
            await stop.wait()
            return
        failures = 0
        rescan: asyncio.TimerHandle | None = None
        while not stop.is_set():
            if failures:
                # Once the new watcher is in place, rescan: what changed while none ran, and
                # what the failure swallowed, is found by the scan; later changes by the watcher.
                rescan = asyncio.get_running_loop().call_later(RESCAN_AFTER_S, self._rescan)
            started = time.monotonic()
            try:
                await self._watch(stop)
                return
            except Exception:
                # A watcher that ran a good while before failing starts its back-off afresh.
                failures = 1 if time.monotonic() - started > RESTART_MAX_S else failures + 1
                logger.warning(
                    "the file watcher failed; restarting it and rescanning %d folders",
                    len(self.roots),
                    exc_info=failures == 1,
                )
            finally:
                if rescan is not None:
                    rescan.cancel()
                    rescan = None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(RESTART_MAX_S, 0.5 * 2 ** min(failures, 8))):
                    await stop.wait()

    def _rescan(self) -> None:
        for root in self.roots:
            self.sink(root, False)  # a folder reported changed is reconciled by the scheduler

    async def _watch(self, stop: asyncio.Event) -> None:
        logger.info("watching %d folders", len(self.roots))
        async for changes in watchfiles.awatch(
            *self.roots,
            watch_filter=self.wanted,
            debounce=self.debounce_ms,
            step=50,
            stop_event=stop,
            ignore_permission_denied=True,
        ):
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("%d changes: %s", len(changes), sorted(changes)[:20])
            for change, path in changes:
                self.sink(Path(path), change == watchfiles.Change.deleted)

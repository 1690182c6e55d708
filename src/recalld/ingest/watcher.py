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
from typing import Any

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
ROOT_CHECK_S = 2.0  # how often watched roots are checked for appearing, vanishing or replaced
POLL_INTERVAL_MS = 3000  # polling of roots past the inotify watch limit
# Folders counted per root when choosing which to poll past the watch limit: beyond this many a
# root is simply huge (counting all of a home folder would take long for nothing).
WATCH_COUNT_CAP = 65_536

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
Identities = dict[Path, tuple[int, int] | None]  # each root's (device, inode); None: not a folder


def _folders(root: Path, cap: int) -> int:
    """How many folders `root` holds, itself included, counting up to `cap` (blocking)."""
    count = 0
    for _ in os.walk(root, onerror=lambda _: None):  # symlinked folders are not followed
        count += 1
        if count >= cap:
            break
    return count


class Watcher:
    """`watchfiles.awatch` over every watched root, feeding `sink(path, deleted)`.

    - Roots are watched with inotify (or the platform's kind) while the system allows it. Past
      the inotify watch limit the root that needs the most watches is polled instead (every
      `POLL_INTERVAL_MS`), then the next if need be, said once in the log and shown by
      `state()`, so no folder is left unwatched in silence.
    - A root whose own deletion the watch reports restarts the watcher at once, and every
      `ROOT_CHECK_S` the roots are checked: one that appears, disappears or is replaced (a new
      inode, which no old watch covers) restarts it too. Either way the root is reported
      changed, so the scheduler reconciles it.

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
        self._polled: dict[Path, str] = {}  # root → why it is polled, for the process's life
        # Roots holding folders we may not read: watched skipping those, which also hides a
        # watch-limit failure there (watchfiles ignores every error then), so only these.
        self._lenient: set[Path] = set()

    def state(self) -> dict[str, Any]:
        """For `status`: how many roots are watched, and which are polled and why."""
        polled = [r for r in self.roots if r in self._polled]
        return {
            "watched": len(self.roots),
            "polled": [os.fspath(r) for r in polled],
            "reason": self._polled[polled[0]] if polled else None,
        }

    async def run(self, roots: Sequence[Path], stop: asyncio.Event) -> None:
        """Watch `roots` until `stop` is set. Roots that do not exist are watched from when
        they do.

        A watcher that fails is restarted, with back-off, and every root is reported changed so
        the scheduler rescans what the failure may have swallowed: watchfiles' Rust side gives
        up on a file name that is not valid UTF-8 (`WatchfilesRustInternalError`), and one such
        file must not stop the daemon (issue 6).
        """
        failures = 0
        rescan: list[Path] = []
        reported: set[Path] = set()
        while not stop.is_set():
            # One look decides both what is watched and what the guard compares with: a root
            # created between two looks would be neither watched nor seen to appear.
            seen = await asyncio.to_thread(_identities, roots)
            present = [r for r in roots if seen[r] is not None]
            self.roots = tuple(present)
            for root in set(roots) - set(present) - reported:
                logger.warning("not watching %s: it is not a folder (watched once it is)", root)
            reported = set(roots) - set(present)
            timer: asyncio.TimerHandle | None = None
            if rescan:
                # Once the new watcher is in place, rescan: what changed while none ran, and
                # what the failure swallowed, is found by the scan; later changes by the watcher.
                timer = asyncio.get_running_loop().call_later(
                    RESCAN_AFTER_S, self._rescan, list(rescan)
                )
            started = time.monotonic()
            try:
                rescan = await self._round(seen, stop)
                failures = 0
                continue
            except Exception as exc:
                if (moved := await self._over_watch_limit(exc)) is not None:
                    rescan = [moved]
                    continue
                if (lenient := self._permission_denied(exc)) is not None:
                    rescan = [lenient]
                    continue
                # A watcher that ran a good while before failing starts its back-off afresh.
                failures = 1 if time.monotonic() - started > RESTART_MAX_S else failures + 1
                rescan = list(self.roots)
                logger.warning(
                    "the file watcher failed; restarting it and rescanning %d folders",
                    len(self.roots),
                    exc_info=failures == 1,
                )
            finally:
                if timer is not None:
                    timer.cancel()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(RESTART_MAX_S, 0.5 * 2 ** min(failures, 8))):
                    await stop.wait()

    async def _over_watch_limit(self, exc: BaseException) -> Path | None:
        """The root to poll from now on when `exc` says the inotify limits are reached: the
        one that needs the most watches (a watch per folder), which frees the most.

        Not simply the root the error names: that is only where adding a watch failed, which
        depends on the order watches were added and on whether the watcher before has let go
        of its own yet (on a busy machine a small root added beside a big one was named). The
        named root only breaks ties.
        """
        text = str(exc)
        if "watch limit" not in text and "MaxFilesWatch" not in text:
            if not (isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENOSPC)):
                return None
        watched = [r for r in self.roots if r not in self._polled]
        if not watched:
            return None
        named = [Path(p) for p in re.findall(r'"(/[^"]*)"', text)]
        sizes = await asyncio.to_thread(lambda: [_folders(r, WATCH_COUNT_CAP) for r in watched])

        def need(i: int) -> tuple[int, bool]:
            root = watched[i]
            return sizes[i], any(p == root or root in p.parents for p in named)

        root = watched[max(range(len(watched)), key=need)]
        reason = (
            "the inotify watch limit is reached (fs.inotify.max_user_watches); polled every "
            f"{POLL_INTERVAL_MS / 1000:g} s instead: raise the limit (e.g. `sysctl "
            "fs.inotify.max_user_watches=524288`) and restart recalld to watch it again"
        )
        self._polled[root] = reason
        logger.warning("cannot watch %s: %s", root, reason)
        return root

    def _permission_denied(self, exc: BaseException) -> Path | None:
        """The root to watch leniently from now on when `exc` is a folder we may not read."""
        text = str(exc)
        if not isinstance(exc, PermissionError) and "ermission denied" not in text:
            return None
        named = [Path(p) for p in re.findall(r'"(/[^"]*)"', text)]
        if isinstance(exc, PermissionError) and exc.filename:
            named.append(Path(os.fsdecode(exc.filename)))
        strict = [r for r in self.roots if r not in self._polled and r not in self._lenient]
        culprits = [r for r in strict if any(p == r or r in p.parents for p in named)]
        chosen = culprits[:1] or strict
        for root in chosen:
            self._lenient.add(root)
            logger.info("%s holds folders recalld may not read; watching it without them", root)
        return chosen[0] if chosen else None

    def _rescan(self, roots: Sequence[Path]) -> None:
        for root in roots:
            self.sink(root, False)  # a folder reported changed is reconciled by the scheduler

    async def _round(self, seen: Identities, stop: asyncio.Event) -> list[Path]:
        """Watch until `stop` is set (returns []) or a root appears, vanishes or is replaced
        (returns those roots, to rescan). `seen`: each root's identity when `self.roots` was
        chosen."""
        halt = asyncio.Event()
        deleted: set[Path] = set()  # roots whose deletion a watch reported
        watched = [r for r in self.roots if r not in self._polled]
        groups = {
            "strict": [r for r in watched if r not in self._lenient],
            "lenient": [r for r in watched if r in self._lenient],
            "polled": [r for r in self.roots if r in self._polled],
        }
        logger.info("watching %d folders (%d polled)", len(self.roots), len(groups["polled"]))
        guard = asyncio.create_task(self._guard(seen, halt))
        tasks = [asyncio.create_task(self._relay(stop, halt)), guard]
        for kind, group in groups.items():
            if group:
                tasks.append(asyncio.create_task(self._stream(group, halt, kind, deleted)))
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                if task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            halt.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        changed = set(guard.result() if guard.done() and not guard.cancelled() else [])
        return [r for r in seen if r in changed or r in deleted]

    @staticmethod
    async def _relay(stop: asyncio.Event, halt: asyncio.Event) -> None:
        stopped = asyncio.create_task(stop.wait())
        halted = asyncio.create_task(halt.wait())
        try:
            await asyncio.wait({stopped, halted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            halted.cancel()
        halt.set()

    @staticmethod
    async def _guard(before: Identities, halt: asyncio.Event) -> list[Path]:
        roots = list(before)
        while not halt.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(ROOT_CHECK_S):
                    await halt.wait()
            if halt.is_set():
                return []
            now = await asyncio.to_thread(_identities, roots)
            if changed := [r for r in roots if now[r] != before[r]]:
                logger.info("watched folders appeared or were replaced: %s", changed)
                halt.set()
                return changed
        return []

    async def _stream(
        self, roots: Sequence[Path], halt: asyncio.Event, kind: str, deleted: set[Path]
    ) -> None:
        names = {os.fspath(r): r for r in roots}

        def wanted(change: watchfiles.Change, path: str) -> bool:
            return path in names or self.wanted(change, path)

        # Strict: errors are raised, so the watch limit is seen (watchfiles drops them all
        # when told to ignore permission errors).
        async for changes in watchfiles.awatch(
            *roots,
            watch_filter=wanted,
            debounce=self.debounce_ms,
            step=50,
            stop_event=halt,
            ignore_permission_denied=kind != "strict",
            force_polling=kind == "polled",
            poll_delay_ms=POLL_INTERVAL_MS,
        ):
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("%d changes: %s", len(changes), sorted(changes)[:20])
            for change, path in changes:
                if path in names and change == watchfiles.Change.deleted:
                    deleted.add(names[path])
                if self.wanted.wanted(path):
                    self.sink(Path(path), change == watchfiles.Change.deleted)
            if deleted:
                # The root's watch went with it, and the guard may never see it replaced: the
                # folder made in its place can get the same inode back (ext4 hands it out again
                # at once), so it is watched anew now.
                logger.info("watched folders were deleted: %s", sorted(deleted))
                halt.set()
                return


def _identities(roots: Sequence[Path]) -> Identities:
    """Each root's device and inode (None: not a folder now)."""
    found: Identities = {}
    for root in roots:
        try:
            info = root.stat()
        except OSError:
            found[root] = None
            continue
        found[root] = (info.st_dev, info.st_ino) if stat_module.S_ISDIR(info.st_mode) else None
    return found

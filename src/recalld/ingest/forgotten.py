"""Paths the user forgot (`recalld forget PATH`), kept out of the store until unforgotten.

Each entry is an absolute path (a file, or a folder and all it holds) or an absolute glob
with gitignore's wildcards (`/home/me/big/**/*.log`), matched by `pathspec`. The entries live
in the store (`storage.forgotten`); this holds them in memory for the admission check
(`ingest.admission`), which consults them before anything else, so a forgotten file stays
out when it is touched, rescanned or found under a newly watched folder.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable

import pathspec

from recalld.errors import QueryError

GLOB_CHARS = frozenset("*?[")


def normalise(pattern: str) -> str:
    """An entry in the form it is stored and matched in.

    Raises:
        QueryError: Not absolute, or the whole file system.
    """
    text = pattern.strip()
    if not text.startswith(os.sep):
        raise QueryError(
            f"{pattern!r} is not an absolute path; pass the full path of a file, a folder or "
            "a glob such as /home/me/notes/**/*.log",
            data={"path": pattern},
        )
    # normpath keeps the wildcards; it only folds `//`, `/./` and a trailing slash.
    text = os.path.normpath(text)
    if text.startswith("//"):
        text = text[1:]
    if text == os.sep:
        raise QueryError("refusing to forget '/', everything", data={"path": pattern})
    return text


def fixed_prefix(pattern: str) -> str:
    """The folder part of `pattern` before its first wildcard: every match lies under it."""
    cut = next((i for i, ch in enumerate(pattern) if ch in GLOB_CHARS), None)
    if cut is None:
        return pattern
    return pattern[: pattern.rfind(os.sep, 0, cut) + 1] or os.sep


class ForgottenPaths:
    """The forgotten entries, swapped whole when they change (readers need no lock)."""

    def __init__(self, patterns: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._specs: tuple[tuple[str, pathspec.GitIgnoreSpec], ...] = ()
        self.replace(patterns)

    @property
    def patterns(self) -> list[str]:
        """The entries, sorted."""
        return [p for p, _ in self._specs]

    def replace(self, patterns: Iterable[str]) -> None:
        """Use exactly these entries from now on."""
        specs = tuple((p, pathspec.GitIgnoreSpec.from_lines([p])) for p in sorted(set(patterns)))
        with self._lock:
            self._specs = specs

    def add(self, pattern: str) -> None:
        """Keep `pattern` out from now on."""
        self.replace([*self.patterns, pattern])

    def remove(self, pattern: str) -> None:
        """Let `pattern` in again."""
        self.replace(p for p in self.patterns if p != pattern)

    def match(self, path: str | os.PathLike[str]) -> str | None:
        """The entry that keeps the absolute `path` out (itself or a folder above it), or
        None."""
        text = os.fspath(path)
        for pattern, spec in self._specs:
            if spec.match_file(text.lstrip(os.sep)):
                return pattern
        return None

    def refusal(self, path: str | os.PathLike[str]) -> str | None:
        """Why `path` may not enter, for the admission check, or None."""
        pattern = self.match(path)
        if pattern is None:
            return None
        return f"forgotten ({pattern}; `recalld unforget {pattern}` lets it in again)"

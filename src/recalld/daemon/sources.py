"""The daemon's sources: folders from config, folders added at run time, and the drop folder.

Run-time additions persist in `<data dir>/sources.json` (written atomically), so they survive a
restart; folders from `daemon.watch` come from the settings on every start and reload and can
only be removed by editing the config.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recalld import private
from recalld.config import Settings
from recalld.errors import ConfigError, NotFoundError
from recalld.ingest.watcher import SOURCE_KINDS, WatchedSource

logger = logging.getLogger(__name__)

SOURCES_FILE = "sources.json"


def _resolve(path: str | Path) -> Path:
    return Path(path).expanduser().resolve()


class SourceRegistry:
    """Every watched folder, with where it came from.

    Args:
        settings: The daemon's settings (`daemon.watch`, the drop folder, the data dir).
    """

    def __init__(self, settings: Settings) -> None:
        self.file = Path(settings.data_dir) / SOURCES_FILE
        self._runtime: dict[Path, WatchedSource] = {}
        self.apply_settings(settings)
        self._load()

    def apply_settings(self, settings: Settings) -> None:
        """Take the configured folders and the drop folder from (re)loaded settings."""
        self.drop = WatchedSource(_resolve(settings.drop_folder), "auto", "drop")
        configured: dict[Path, WatchedSource] = {}
        for entry in settings.daemon.watch:
            # `daemon.watch = ["~/notes", "~/chats:conversations"]`: an optional `:kind`.
            path, _, kind = entry.rpartition(":") if _has_kind(entry) else (entry, "", "auto")
            configured[_resolve(path)] = WatchedSource(_resolve(path), kind or "auto", "config")
        self._configured = configured

    def _load(self) -> None:
        private.private_file(self.file)
        try:
            raw = json.loads(self.file.read_text("utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            logger.warning("ignoring unreadable %s: %s", self.file, exc)
            return
        for item in raw.get("sources", []):
            path = _resolve(item["path"])
            exclude = tuple(str(p) for p in item.get("exclude", []))
            self._runtime[path] = WatchedSource(path, item.get("kind", "auto"), "runtime", exclude)

    def _save(self) -> None:
        payload = {
            "version": 1,
            "sources": [
                {"path": os.fspath(s.path), "kind": s.kind, "exclude": list(s.exclude)}
                for s in self._runtime.values()
            ],
        }
        private.private_dir(self.file.parent)
        tmp = self.file.with_suffix(".tmp")
        private.create_private(tmp)
        tmp.write_text(json.dumps(payload, indent=2) + "\n", "utf-8")
        os.replace(tmp, self.file)

    def all(self) -> list[WatchedSource]:
        """The drop folder, configured folders, then run-time ones (a path appears once)."""
        seen: dict[Path, WatchedSource] = {self.drop.path: self.drop}
        for source in [*self._configured.values(), *self._runtime.values()]:
            seen.setdefault(source.path, source)
        return list(seen.values())

    def add(self, path: str, kind: str = "auto", exclude: Sequence[str] = ()) -> WatchedSource:
        """Watch a folder from now on (persisted), without what matches `exclude`
        (gitignore-style patterns relative to the folder).

        Raises:
            ConfigError: The kind is unknown.
            NotFoundError: The folder does not exist.
        """
        if kind not in SOURCE_KINDS:
            raise ConfigError(
                f"unknown source kind {kind!r}; use one of {', '.join(SOURCE_KINDS)}",
                data={"kind": kind},
            )
        resolved = _resolve(path)
        if not resolved.is_dir():
            raise NotFoundError(
                f"{resolved} is not a folder; create it or pass another path",
                data={"path": os.fspath(resolved)},
            )
        source = WatchedSource(resolved, kind, "runtime", tuple(exclude))
        self._runtime[resolved] = source
        self._save()
        logger.info("added source %s (%s)", resolved, kind)
        return source

    def remove(self, path: str) -> WatchedSource:
        """Stop watching a folder added at run time.

        Raises:
            ConfigError: The folder comes from the config file or is the drop folder.
            NotFoundError: The folder is not watched.
        """
        resolved = _resolve(path)
        if resolved == self.drop.path:
            raise ConfigError(
                "the drop folder is always watched; set daemon.drop_folder to move it",
                data={"path": os.fspath(resolved)},
            )
        if resolved in self._configured and resolved not in self._runtime:
            raise ConfigError(
                f"{resolved} is set in daemon.watch; remove it from the config "
                "file and reload (SIGHUP)",
                data={"path": os.fspath(resolved)},
            )
        source = self._runtime.pop(resolved, None)
        if source is None:
            raise NotFoundError(
                f"{resolved} is not a watched folder; see `recalld sources list`",
                data={"path": os.fspath(resolved)},
            )
        self._save()
        logger.info("removed source %s", resolved)
        return source


def _has_kind(entry: str) -> bool:
    _, sep, kind = entry.rpartition(":")
    return bool(sep) and kind in SOURCE_KINDS


def source_dict(source: WatchedSource) -> dict[str, Any]:
    """A source as the protocol returns it."""
    out: dict[str, Any] = {
        "path": os.fspath(source.path),
        "kind": source.kind,
        "origin": source.origin,
        "exists": source.path.is_dir(),
    }
    if source.exclude:
        out["exclude"] = list(source.exclude)
    return out

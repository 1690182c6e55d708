"""What `check --repair` did, on any backend (`Store.repair` returns one)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)


@dataclass
class RepairReport:
    """What a repair did.

    Attributes:
        actions: `{"name", "count", "detail"}` for each kind of fix that changed something.
        reingest: Sources of `partial` documents backed by files, for the caller to re-ingest.
        unrepaired: `{"name", "detail"}` for problems repair cannot fix.
        recheck: Whether the store may have changed, so it is checked again; a backend that
            only reported what it found leaves the first check standing.
    """

    actions: list[dict[str, Any]] = field(default_factory=list)
    reingest: list[str] = field(default_factory=list)
    unrepaired: list[dict[str, str]] = field(default_factory=list)
    recheck: bool = True

    def did(self, name: str, count: int, detail: str) -> None:
        """Record a fix (nothing when `count` is 0)."""
        if count:
            logger.info("repair: %s: %d (%s)", name, count, detail)
            self.actions.append({"name": name, "count": count, "detail": detail})

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        return {
            "actions": list(self.actions),
            "reingest": list(self.reingest),
            "unrepaired": list(self.unrepaired),
        }

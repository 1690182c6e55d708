"""The forgotten paths (`recalld forget PATH`), kept in the store so they outlive restarts and
travel with it. Each is a `meta` row `forgotten:<pattern>` whose value records when; both
backends have that table, and this SQL runs on both (`PgConn` takes `?` placeholders)."""

from __future__ import annotations

import json
import time
from typing import Any

from recalld.storage.contract import Reader, Writer

PREFIX = "forgotten:"


async def entries(reader: Reader) -> list[dict[str, Any]]:
    """Every forgotten pattern with when it was added, in pattern order."""
    rows = await reader.fetchall(
        "SELECT key, value FROM meta WHERE key >= ? AND key < ? ORDER BY key",
        (PREFIX, PREFIX + "\U0010ffff"),
    )
    out = []
    for key, value in rows:
        try:
            at = json.loads(value).get("at")
        except (ValueError, AttributeError):
            at = None
        out.append({"pattern": str(key)[len(PREFIX) :], "at": at})
    return out


async def add(writer: Writer, pattern: str) -> None:
    """Record `pattern` (inside the caller's write transaction); again is a no-op."""
    found = await writer.fetchall("SELECT 1 FROM meta WHERE key = ?", (PREFIX + pattern,))
    if not found:
        await writer.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?)",
            (PREFIX + pattern, json.dumps({"at": time.time()})),
        )


async def remove(writer: Writer, pattern: str) -> bool:
    """Drop `pattern`; returns whether it was there."""
    found = await writer.fetchall("SELECT 1 FROM meta WHERE key = ?", (PREFIX + pattern,))
    if found:
        await writer.execute("DELETE FROM meta WHERE key = ?", (PREFIX + pattern,))
    return bool(found)

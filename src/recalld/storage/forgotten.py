"""The forgotten paths (`recalld forget PATH`), kept in the store so they outlive restarts and
travel with it. Each is a `meta` row `forgotten:<pattern>` whose value records when; both
backends have that table, and this SQL runs on both (`PgConn` takes `?` placeholders)."""

from __future__ import annotations

import json
import time
from typing import Any

from recalld.storage.readers import fetchall

PREFIX = "forgotten:"


async def entries(conn: Any) -> list[dict[str, Any]]:
    """Every forgotten pattern with when it was added, in pattern order."""
    rows = await fetchall(
        conn,
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


async def add(conn: Any, pattern: str) -> None:
    """Record `pattern` (inside the caller's write transaction); again is a no-op."""
    found = await fetchall(conn, "SELECT 1 FROM meta WHERE key = ?", (PREFIX + pattern,))
    if not found:
        await conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?)",
            (PREFIX + pattern, json.dumps({"at": time.time()})),
        )


async def remove(conn: Any, pattern: str) -> bool:
    """Drop `pattern`; returns whether it was there."""
    found = await fetchall(conn, "SELECT 1 FROM meta WHERE key = ?", (PREFIX + pattern,))
    if found:
        await conn.execute("DELETE FROM meta WHERE key = ?", (PREFIX + pattern,))
    return bool(found)

"""One trip to an aiosqlite connection's thread for several statements."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

from recalld.storage.sqlite.connection import connect
from recalld.storage.sqlite.on_thread import on_thread


async def test_work_runs_on_the_connections_thread_with_its_connection(tmp_path: Path) -> None:
    conn = await aiosqlite.Connection(lambda: connect(tmp_path / "t.db"), 64)
    try:
        await conn.execute("CREATE TABLE t (x INTEGER)")
        statement_thread = await on_thread(conn, lambda raw: threading.get_ident())

        def work(raw: Any) -> tuple[int, int]:
            raw.executemany("INSERT INTO t (x) VALUES (?)", [(1,), (2,)])
            total = raw.execute("SELECT sum(x) FROM t").fetchone()[0]
            return threading.get_ident(), int(total)

        thread, total = await on_thread(conn, work)
        assert total == 3
        assert thread == statement_thread != threading.get_ident()
        # Its rows are the connection's: aiosqlite's own calls see them.
        [row] = await conn.execute_fetchall("SELECT count(*) FROM t")
        assert row[0] == 2
    finally:
        await conn.close()


async def test_an_error_in_the_work_reaches_the_caller(tmp_path: Path) -> None:
    conn = await aiosqlite.Connection(lambda: connect(tmp_path / "t.db"), 64)
    try:
        with pytest.raises(Exception, match="no such table"):
            await on_thread(conn, lambda raw: raw.execute("SELECT * FROM missing"))
    finally:
        await conn.close()

"""Two daemons, as on two machines, sharing one PostgreSQL store and watching the same files."""

from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.helpers.postgres import VECTOR_INDEX

from .conftest import Daemon

pytestmark = pytest.mark.integration

FILES = 40


def duplicates(url: str) -> tuple[int, int]:
    with psycopg.connect(url) as conn:
        docs = conn.execute(
            "SELECT count(*) FROM (SELECT source FROM documents GROUP BY source "
            "HAVING count(*) > 1) x"
        ).fetchone()
        chunks = conn.execute(
            "SELECT count(*) FROM (SELECT document_id, key FROM chunks GROUP BY 1, 2 "
            "HAVING count(*) > 1) x"
        ).fetchone()
    assert docs and chunks
    return int(docs[0]), int(chunks[0])


def test_two_daemons_watching_the_same_folder_store_each_file_once(
    tmp_path: Path, short_dir: Path, pg_url: str, make_daemon: Callable[..., Daemon]
):
    shared = tmp_path / "shared"
    shared.mkdir()
    for i in range(FILES):
        (shared / f"n{i:02d}.md").write_text(f"# Note {i}\n\nShared note {i} about widget{i}.\n")
    env = {
        "RECALLD_STORE__PATH": pg_url,
        "RECALLD_STORE__VECTOR_INDEX": VECTOR_INDEX,
        "RECALLD_DAEMON__WATCH": str(shared),
    }
    first = make_daemon(tmp_path / "h1", short_dir / "a.sock", **env)
    second = make_daemon(tmp_path / "h2", short_dir / "b.sock", **env)
    first.start()
    second.start()
    first.wait_ready()
    status = second.wait_ready()
    assert status["store"].startswith("postgresql://") and "@" in status["store"]
    for daemon in (first, second):
        daemon.wait_for(lambda s: s["counts"]["documents"] == FILES, timeout=90)
    assert duplicates(pg_url) == (0, 0)

    # An edit is seen by both daemons; the document is still stored once, with the new text.
    (shared / "n07.md").write_text("# Note 7\n\nRewritten: the gadget replaced widget7.\n")
    for daemon in (first, second):
        daemon.wait_for(lambda s, d=daemon: "n07.md" in "".join(d.search_sources("gadget")))
    assert duplicates(pg_url) == (0, 0)
    assert first.search_sources("widget7 gadget")[0].endswith("n07.md")
    report = second.client.check()
    assert report["ok"], report
    assert report["counts"]["documents"] == FILES
    assert report["counts"]["chunks"] == report["counts"]["vectors"]
    assert first.stop() == 0 and second.stop() == 0

"""See and undo (issue 16): `recalld list`, `sources list` with counts, and `forget PATH` that
keeps a folder, a glob or a file out of the store, against a real daemon watching a folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from recalld.errors import NotFoundError, ProtocolError, QueryError
from tests.integration.conftest import Daemon

pytestmark = pytest.mark.integration


def cli(daemon: Daemon, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "recalld", *args, "--json"],
        env=daemon.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def sources_of(page: dict[str, Any]) -> list[str]:
    return [item["source"] for item in page["items"]]


def touch(path: Path) -> None:
    later = time.time() + 5
    path.write_text(path.read_text() + "\nTouched again.\n")
    os.utime(path, (later, later))


def project(root: Path) -> Path:
    folder = root / "proj"
    (folder / "notes").mkdir(parents=True)
    (folder / "logs").mkdir()
    (folder / "notes" / "cutover.md").write_text("# Cutover\n\nThe postgres cutover is Friday.\n")
    (folder / "notes" / "boat.md").write_text("# Boat\n\nThe oars are in the blue shed.\n")
    (folder / "main.py").write_text("def pelican():\n    return 'brown pelican'\n")
    (folder / "logs" / "app.log.md").write_text("# Log\n\nwombat request served in 3 ms\n")
    (folder / "secrets.md").write_text("# Private\n\nThe vault combination is marmalade.\n")
    (folder / "dev.plist").write_text("<plist></plist>\n")  # no chunker takes it: skipped
    return folder


def test_list_sources_and_forget_that_sticks(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    folder = project(tmp_path)
    daemon = make_daemon()
    daemon.start()
    daemon.wait_ready()
    client = daemon.client
    client.sources_add(folder)
    daemon.wait_for(lambda s: s["counts"]["documents"] >= 5)
    client.remember("Ines prefers tea to coffee", memory_type="preference", tags=["drinks"])
    client.remember("The harbour closes at nine", tags=["harbour"], event_time="2021-03-01")

    # Documents: source order, paging, filters by source prefix and kind; memories apart.
    every = client.browse("documents")
    assert every["total"] == 5 and every["next_offset"] is None
    assert sources_of(every) == sorted(sources_of(every))
    first = client.browse("documents", limit=2)
    second = client.browse("documents", limit=2, offset=first["next_offset"])
    assert first["next_offset"] == 2 and second["next_offset"] == 4
    assert sources_of(first) + sources_of(second) == sources_of(every)[:4]
    notes = client.browse("documents", sources=[str(folder / "notes")])
    assert sources_of(notes) == [str(folder / "notes" / n) for n in ("boat.md", "cutover.md")]
    assert sources_of(client.browse("documents", kinds=["code"])) == [str(folder / "main.py")]
    skipped = client.browse("documents", kinds=["skipped"])
    assert sources_of(skipped) == [str(folder / "dev.plist")]
    assert skipped["items"][0]["chunks"] == 0
    memories = client.browse("memories")
    assert [m["text"] for m in memories["items"]] == [
        "Ines prefers tea to coffee",
        "The harbour closes at nine",
    ]
    assert [m["type"] for m in client.browse("memories", tags=["drinks"])["items"]] == [
        "preference"
    ]
    assert client.browse("memories", until="2022-01-01")["total"] == 1
    assert client.browse("memories", kinds=["preference"])["total"] == 1
    with pytest.raises(ProtocolError, match="'what' must be one of"):
        client.call("list", {"what": "everything"})

    # The same over the CLI, and sources with their counts.
    shown = cli(daemon, "list", "--source", str(folder / "notes"), "--limit", "1")
    assert shown["total"] == 2 and len(shown["items"]) == 1 and shown["next_offset"] == 1
    watched = {s["path"]: s for s in cli(daemon, "sources", "list")}
    mine = watched[str(folder)]
    assert (mine["documents"], mine["errors"]) == (5, 0)
    assert mine["chunks"] >= 5 and mine["last_scan"] is not None
    assert cli(daemon, "list", "sources")["total"] == len(watched)

    # Forget a folder, a glob and a file: gone now, and still gone after touches and new files.
    gone = cli(daemon, "forget", str(folder / "notes"))
    assert gone["forgotten"] == 2 and gone["pattern"] == str(folder / "notes")
    gone = cli(daemon, "forget", str(folder / "logs" / "*.md"))
    assert gone["sources"] == [str(folder / "logs" / "app.log.md")]
    assert cli(daemon, "forget", str(folder / "secrets.md"))["forgotten"] == 1
    touch(folder / "notes" / "cutover.md")
    touch(folder / "logs" / "app.log.md")
    touch(folder / "secrets.md")
    (folder / "notes" / "new.md").write_text("# New\n\nA freshly written kiwi note.\n")
    (folder / "other.md").write_text("# Other\n\nAn albatross note that may come in.\n")
    daemon.wait_for(lambda s: s["counts"]["documents"] == 2 + 2)  # main.py, other.md + memories
    assert sources_of(client.browse("documents")) == [
        str(folder / "main.py"),
        str(folder / "other.md"),
    ]
    for word in ("cutover", "wombat", "marmalade", "kiwi"):
        assert daemon.search_sources(word) == [], word
    listed = cli(daemon, "forget", "--list-ignored")["ignored"]
    assert [e["pattern"] for e in listed] == sorted(
        [str(folder / "notes"), str(folder / "logs" / "*.md"), str(folder / "secrets.md")]
    )
    assert all(e["at"] > 0 for e in listed)
    # Named explicitly, a forgotten file is refused too, with the way back.
    report = client.ingest(folder / "secrets.md")
    assert report["refused"] == 1 and "unforget" in report["errors"][0]["message"]

    # The entries live in the store: a restarted daemon keeps them out.
    assert daemon.stop() == 0
    touch(folder / "notes" / "boat.md")
    daemon.start()
    daemon.wait_ready()
    daemon.wait_for(lambda s: s["counts"]["documents"] == 4)
    assert daemon.search_sources("oars") == []

    # unforget lets the folder in again (its watched folder is rescanned).
    back = cli(daemon, "unforget", str(folder / "notes"))
    assert back["rescanning"] == [str(folder)]
    daemon.wait_for(lambda s: s["counts"]["documents"] == 7)
    assert daemon.search_sources("kiwi") == [str(folder / "notes" / "new.md")]
    assert daemon.search_sources("marmalade") == []
    with pytest.raises(NotFoundError, match="is not forgotten"):
        client.unforget(folder / "notes")
    with pytest.raises(QueryError, match="refusing to forget '/'"):
        client.call("forget/path", {"path": "/"})
    assert daemon.stop() == 0

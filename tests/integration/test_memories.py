"""Issue 8 against the daemon as a real process: edits with history, links, knowledge updates
and forgetting by query, through the client and the `recalld` command line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest

from recalld.errors import NotFoundError
from tests.integration.conftest import Daemon

pytestmark = pytest.mark.integration


def cli(daemon: Daemon, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recalld", *args],
        env=daemon.env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_memories_links_and_forget_by_query(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(RECALLD_LINKS__SUPERSEDE_SIMILARITY="0")
    daemon.start()
    daemon.wait_ready()
    client = daemon.client

    # Remember with a type and an event time; a newer value supersedes the older one.
    old = client.remember(
        "Bruno works at Initech on the payroll team",
        memory_type="semantic",
        event_time="2023-01-05",
    )
    new = client.remember("Bruno now works at Globex on the payroll team", event_time="2024-06-01")
    assert client.get(old["id"])["status"] == "superseded"
    assert client.get(old["id"])["event_time"] == 1672876800.0
    links = client.links(old["id"], direction="in")
    assert [(x["src"], x["relation"]) for x in links] == [(new["id"], "supersedes")]

    # Edit from the command line; the history keeps the first version.
    edited = cli(daemon, "edit", str(new["id"]), "Bruno", "works", "at", "Globex", "--json")
    assert edited.returncode == 0, edited.stderr
    assert json.loads(edited.stdout)["version"] == 2
    new_source = json.loads(edited.stdout)["source"]
    shown = json.loads(cli(daemon, "history", str(new["id"]), "--json").stdout)
    assert [v["text"] for v in shown["history"]] == [
        "Bruno now works at Globex on the payroll team"
    ]
    assert shown["text"] == "Bruno works at Globex"

    # Links from the command line.
    added = cli(daemon, "link", "add", str(old["id"]), str(new["id"]), "-r", "related")
    assert added.returncode == 0, added.stderr
    listed = json.loads(cli(daemon, "link", "list", str(old["id"]), "--json").stdout)
    assert {x["relation"] for x in listed} == {"related", "supersedes"}
    removed = cli(daemon, "link", "remove", str(old["id"]), str(new["id"]), "-r", "related")
    assert removed.returncode == 0 and "Removed 1" in removed.stdout

    # Forget by query: answering no keeps everything; --yes removes what was shown.
    declined = cli(daemon, "forget", "--query", "Initech payroll", stdin="n\n")
    assert declined.returncode == 1 and "would forget" in declined.stdout
    assert client.get(old["id"])["id"] == old["id"]
    confirmed = cli(daemon, "forget", "--query", "Initech payroll", stdin="y\n")
    assert confirmed.returncode == 0, confirmed.stderr
    assert "Forgot 1 source(s)" in confirmed.stdout
    assert client.search("Initech", mode="bm25")["hits"] == []
    quiet = cli(daemon, "forget", "--query", "Globex", "--yes", "--json")
    assert quiet.returncode == 0, quiet.stderr
    assert json.loads(quiet.stdout)["forgotten"] == [new_source]
    with pytest.raises(NotFoundError):
        client.get(new["id"])
    assert daemon.stop() == 0

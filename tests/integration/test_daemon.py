"""The daemon as a real process: watched folders and the drop folder end to end, growing
conversation logs, SIGTERM mid-ingest and restart, and a second daemon refused."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Daemon

pytestmark = pytest.mark.integration


def rounds(start: int, count: int) -> str:
    lines = []
    for i in range(start, start + count):
        day = f"2024-03-{i + 1:02d}"
        lines.append(
            json.dumps(
                {
                    "role": "user",
                    "timestamp": f"{day}T09:00:00Z",
                    "content": f"My tortoise number {i} is called Shelly{i}.",
                }
            )
        )
        lines.append(
            json.dumps(
                {
                    "role": "assistant",
                    "timestamp": f"{day}T09:00:05Z",
                    "content": f"Shelly{i} sounds like a fine tortoise.",
                }
            )
        )
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_sources_end_to_end(make_daemon: Callable[..., Daemon], tmp_path: Path) -> None:
    watched = tmp_path / "watched"
    watched.mkdir()
    (watched / "notes.md").write_text("# Lab notes\n\nThe zebrafish tank needs cleaning.\n")
    daemon = make_daemon(RECALLD_DAEMON__WATCH=str(watched))
    daemon.start()
    status = daemon.wait_ready()
    drop = Path(status["drop_folder"])
    assert drop == daemon.home / "data" / "drop" and drop.is_dir()
    assert "drop folder: " + str(drop) in daemon.log.read_text()

    # Drop files of each kind into the watched folder and the drop folder.
    (watched / "physics.py").write_text(
        'def compute_flux(field, area):\n    """Magnetic flux."""\n    return field * area\n'
    )
    (watched / "chat.jsonl").write_text(rounds(0, 2))
    (drop / "dropped.md").write_text("Dropped in: the quokka is smiling.\n")
    daemon.wait_for(lambda s: s["counts"]["documents"] == 4)
    assert daemon.search_sources("zebrafish") == [str(watched / "notes.md")]
    assert daemon.search_sources("compute_flux") == [str(watched / "physics.py")]
    assert daemon.search_sources("quokka") == [str(drop / "dropped.md")]
    assert str(watched / "chat.jsonl") in daemon.search_sources("Shelly1")
    assert daemon.client.search("tortoise", filters={"granularities": ["round"]})["hits"]

    # The command-line client against the same daemon.
    out = subprocess.run(
        [sys.executable, "-m", "recalld", "search", "quokka", "--json"],
        env=daemon.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(out)["hits"][0]["source"] == str(drop / "dropped.md")

    # Edit one, delete one, rename one.
    (watched / "notes.md").write_text("# Lab notes\n\nThe axolotl tank needs cleaning.\n")
    (watched / "physics.py").unlink()
    (drop / "dropped.md").rename(drop / "renamed.md")
    daemon.wait_for(
        lambda s: (
            s["counts"]["documents"] == 3
            and bool(daemon.search_sources("axolotl"))
            and daemon.search_sources("quokka") == [str(drop / "renamed.md")]
        )
    )
    assert daemon.search_sources("zebrafish") == []
    assert daemon.search_sources("compute_flux") == []

    # Append rounds to the conversation log: only the new chunks are embedded.
    [old_round] = [
        h
        for h in daemon.client.search("Shelly0", mode="bm25", filters={"granularities": ["round"]})[
            "hits"
        ]
        if "Shelly0" in h["text"]
    ][:1]
    before = daemon.client.status()
    with (watched / "chat.jsonl").open("a") as log:
        log.write(rounds(2, 2))
    after = daemon.wait_for(lambda s: bool(daemon.search_sources("Shelly3")))
    embedded = after["ingested"]["embedded"] - before["ingested"]["embedded"]
    added = after["counts"]["chunks"] - before["counts"]["chunks"]
    assert embedded == added > 0  # the new sessions, rounds and facts; nothing re-embedded
    assert daemon.client.get(old_round["id"])["text"] == old_round["text"]
    assert daemon.client.check()["ok"]
    assert daemon.stop() == 0
    assert not daemon.socket.exists()


@pytest.mark.slow
def test_sigterm_mid_ingest_then_restart_ingests_everything_once(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    watched = tmp_path / "bulk"
    for i in range(800):
        path = watched / f"d{i % 8}" / f"note{i}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"# Note {i}\n\n"
            + f"Paragraph about item{i} and its history. " * 20
            + "\n\nA second paragraph with more words about the weather.\n"
        )
    daemon = make_daemon(RECALLD_DAEMON__WATCH=str(watched))
    daemon.start("--shutdown-timeout", "0.2")  # stop with work left over
    daemon.wait_ready()
    deadline = time.monotonic() + 60
    while (status := daemon.client.status())["counts"]["documents"] == 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert status["pending"] > 0, "ingest finished before the signal; use more files"
    assert daemon.stop(signal.SIGTERM) == 0
    assert "shutting down" in daemon.log.read_text()
    between = subprocess.run(
        [sys.executable, "-m", "recalld", "check", "--offline", "--json"],
        env=daemon.env,
        capture_output=True,
        text=True,
        check=True,
    )
    done_first = json.loads(between.stdout)["counts"]["documents"]
    assert 0 < done_first < 800

    daemon.start()
    daemon.wait_ready()
    status = daemon.wait_for(lambda s: s["counts"]["documents"] == 800, timeout=60)
    # The second run ingested exactly what the first did not finish: nothing twice.
    assert status["ingested"]["ingested"] == 800 - done_first
    assert status["errors"] == 0 and status["counts"]["partial_documents"] == 0
    report = daemon.client.check()
    assert report["ok"], report
    assert report["counts"]["vectors"] == report["counts"]["chunks"]
    assert daemon.stop() == 0


def test_second_daemon_on_the_same_home_exits_3(
    make_daemon: Callable[..., Daemon], tmp_path: Path, short_dir: Path
) -> None:
    first = make_daemon()
    first.start()
    first.wait_ready()
    # Same home and socket.
    second = make_daemon(home=first.home, socket=first.socket)
    assert second.start().wait(30) == 3
    assert "already running" in second.log.read_text()
    # Same home, another socket: the store lock refuses it.
    third = make_daemon(home=first.home, socket=short_dir / "other.sock")
    assert third.start().wait(30) == 3
    assert first.client.status()["state"] == "ready"
    assert first.stop() == 0


@pytest.mark.slow
def test_cli_search_time_range_budget_and_time_words(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon()
    daemon.start()
    daemon.wait_ready()
    daemon.client.remember("Booked the dentist for a checkup", event_time="2023-03-02")
    newer = daemon.client.remember("Booked the dentist for a filling", event_time="2023-06-20")
    for other in ("The boiler needs a service", "Paid the car insurance", "Lunch with Sam"):
        daemon.client.remember(other, event_time="2023-05-01")

    def cli(*args: str) -> dict[str, Any]:
        out = subprocess.run(
            [sys.executable, "-m", "recalld", "search", *args, "--json"],
            env=daemon.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        result: dict[str, Any] = json.loads(out)
        return result

    ranged = cli("dentist", "booked", "--after", "2023-06-01", "--before", "2023-07-01")
    assert [h["id"] for h in ranged["hits"]] == [newer["id"]]
    packed = cli("dentist", "booked", "--budget", "6")
    assert 0 < packed["packing"]["used_tokens"] <= 6 and len(packed["hits"]) == 1
    worded = cli("dentist", "in", "June", "2023", "--explain")
    assert worded["explain"]["time"]["start"] == "2023-06-01T00:00:00Z"
    assert worded["hits"][0]["id"] == newer["id"]
    plain = cli("dentist", "in", "June", "2023", "--explain", "--no-time")
    assert "time" not in plain["explain"]
    assert daemon.stop() == 0

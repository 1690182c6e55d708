"""A store holding values an older recalld let in, or a flipped bit wrote (issue 18, item 1): an
`inf` event time, an importance of `inf`, tags that are not JSON, text that is not UTF-8. Reads
go on (`get`, search, history), `check` names the rows by id, `export` online and `--offline`
skip and report them and never stop, `check --repair` resets them, and an export file holding
such a value is refused by `import` naming its line and column."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest

from recalld.cli import main
from recalld.errors import ParseError
from recalld.storage.sqlite.connection import connect
from tests.pipeline.conftest import Running, daemon_env, start, stop

MEMORIES = [
    "The heron nests on the east bank",
    "The kingfisher dives at dawn",
    "The otter holt is under the willow",
    "The grebe dances in spring",
]


def poison(store: Path, ids: dict[str, int]) -> None:
    """Write what the socket now refuses straight into the file, as an older recalld did."""
    conn = connect(store)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE chunks SET event_time = ? WHERE id = ?", (float("inf"), ids["heron"]))
        conn.execute(
            "UPDATE chunks SET importance = ?, tags = 'not json' WHERE id = ?",
            (float("-inf"), ids["kingfisher"]),
        )
        conn.execute(
            "UPDATE documents SET mtime = ? WHERE id = (SELECT document_id FROM chunks "
            "WHERE id = ?)",
            (float("inf"), ids["kingfisher"]),
        )
        # A flipped bit: the text is no longer UTF-8 (FTS keeps its own copy of the words).
        conn.execute(
            "UPDATE chunks SET meta = CAST(? AS TEXT) WHERE id = ?",
            (b'{"note": "caf\xff"}', ids["otter"]),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    captured = capsys.readouterr()
    return int(exit_info.value.code or 0), captured.out, captured.err


async def test_a_poisoned_store_stays_readable_checkable_exportable_and_repairable(
    isolated_home: Path, short_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = daemon_env(isolated_home, short_dir / "s.sock")
    server, task = await start(env)
    running = Running(server, task, short_dir / "s.sock", isolated_home, env)
    ids: dict[str, int] = {}
    try:
        async with running.client() as client:
            for text in MEMORIES:
                ids[text.split()[1]] = (await client.remember(text, tags=["river"]))["id"]
        assert server.memory is not None
        store = Path(server.memory.store.path)
    finally:
        assert await stop(server, task) == 0
    await asyncio.to_thread(poison, store, ids)

    server, task = await start(env)
    running = Running(server, task, short_dir / "s.sock", isolated_home, env)
    try:
        async with running.client() as client:
            # Every read that reaches the bad rows still answers, on the same connection.
            heron = await client.get(ids["heron"])
            assert heron["event_time"] is None and "heron" in heron["text"]
            kingfisher = await client.get(ids["kingfisher"])
            assert kingfisher["importance"] == 0.5 and kingfisher["tags"] == []
            # Read with what can be decoded: the rest of the row is not lost to one byte.
            assert (await client.get(ids["otter"]))["meta"] == {"note": "caf\ufffd"}
            for query in ("heron", "kingfisher", "otter", "east bank dawn willow"):
                for mode in ("bm25", "hybrid"):
                    assert (await client.search(query, mode=mode))["hits"], (query, mode)
            assert (await client.history(ids["heron"]))["history"] == []
            # `check` names the rows.
            report = await client.check()
            assert not report["ok"]
            values = next(c for c in report["checks"] if c["name"] == "unreadable_values")
            assert values["value"] == 4  # three chunks, and the kingfisher's document row
            bad = sorted([ids["heron"], ids["kingfisher"], ids["otter"]])
            assert values["ids"]["chunks"] == bad and len(values["ids"]["documents"]) == 1
            assert "event_time" in values["detail"] and "check --repair" in values["detail"]
            # `export` goes on past them, and says what it left out.
            out = io.StringIO()
            result = await client.export(out.write)
            skipped = result["skipped_unreadable"]
            # Each memory is its own document, and shares its chunk's id in this store.
            assert sorted(s["id"] for s in skipped) == bad
            problems = {s["id"]: s["problem"] for s in skipped}
            assert problems[ids["kingfisher"]].startswith("mtime: inf")  # the document row
            assert problems[ids["heron"]].startswith(f"chunk {ids['heron']}: event_time: inf")
            assert result["counts"]["documents"] == 1 and result["counts"]["chunks"] == 1
            lines = out.getvalue().splitlines()
            assert json.loads(lines[-1])["type"] == "footer"
            assert any("grebe" in line for line in lines)
        # `export --offline` too, from the command line, beside the running daemon.
        target = tmp_path / "offline.jsonl"
        code, _, err = await asyncio.to_thread(
            run_cli, ["export", "--offline", str(target)], capsys
        )
        assert code == 0, err
        assert err.count("skipped documents") == 3 and "check --repair" in err
        footer = json.loads(target.read_text().splitlines()[-1])
        assert footer["counts"]["chunks"] == 1 and len(footer["skipped_unreadable"]) == 3

        async with running.client() as client:
            repaired = await client.check(repair=True)
            assert repaired["ok"], repaired
            actions = {a["name"]: a["count"] for a in repaired["repair"]["actions"]}
            # event_time, importance, tags, meta, and the document's mtime
            assert actions["values_cleared"] == 5
            assert (await client.check())["ok"]
            out = io.StringIO()
            result = await client.export(out.write)
            assert result["skipped_unreadable"] == []
            assert result["counts"]["chunks"] == 4
            # Nothing of the memories themselves was lost.
            for text in MEMORIES:
                hits = (await client.search(text, mode="bm25"))["hits"]
                assert hits[0]["text"] == text
    finally:
        assert await stop(server, task) == 0


@pytest.mark.parametrize("token", ["1e400", "-1e400", "Infinity", "NaN"])
async def test_import_refuses_a_value_it_could_not_give_back(
    daemon: Running, tmp_path: Path, token: str
) -> None:
    async with daemon.client() as client:
        await client.remember("The lock code is 4711", tags=["home"])
        out = io.StringIO()
        await client.export(out.write)
        lines = out.getvalue().splitlines()
        number = next(i for i, line in enumerate(lines) if '"type":"chunks"' in line)
        row: dict[str, Any] = json.loads(lines[number])
        row["row"]["event_time"] = "@poison"
        lines[number] = json.dumps(row).replace('"@poison"', token)
        bad = tmp_path / "poisoned.jsonl"
        bad.write_text("\n".join(lines) + "\n")
        with pytest.raises(ParseError, match=r"line \d+: chunks.event_time: .* not a") as caught:
            await client.import_file(bad)
        assert caught.value.data["line"] == number + 1
        assert (await client.check())["ok"]


async def test_a_log_stamped_with_an_impossible_time_is_stored_readable(
    daemon: Running, tmp_path: Path
) -> None:
    """A chat log whose timestamps are `1e400` and `-1e400` (inf once parsed) is ingested with
    no event time from them, and every read and check of it works."""
    log = tmp_path / "chat.jsonl"
    lines = [
        '{"role": "user", "content": "Where did the puffins nest?", "timestamp": 1e400}',
        '{"role": "assistant", "content": "The puffins nest on the cliffs.", "timestamp": -1e400}',
        '{"role": "user", "content": "And the terns?", "timestamp": 1700000000}',
        '{"role": "assistant", "content": "The terns nest on the beach.", "timestamp": 1700000100}',
    ]
    log.write_text("\n".join(lines) + "\n")
    async with daemon.client() as client:
        await client.ingest(log)
        for query in ("puffins cliffs", "terns beach"):
            hits = (await client.search(query, mode="bm25"))["hits"]
            assert hits and hits[0]["source"] == str(log)
            got = await client.get(hits[0]["id"])
            assert got["event_time"] is None or -1e11 < got["event_time"] < 1e11
        assert (await client.check())["ok"]
        out = io.StringIO()
        assert (await client.export(out.write))["skipped_unreadable"] == []

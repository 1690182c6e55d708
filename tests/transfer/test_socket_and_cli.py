"""`export` and `import` over the socket (streamed in progress notifications) and from the
command line, through the daemon (on SQLite and PostgreSQL) and `--offline`."""

from __future__ import annotations

import asyncio
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from recalld.cli import main
from recalld.client import Client
from recalld.daemon import transfer
from recalld.errors import NotFoundError, ParseError, ProtocolError
from tests.pipeline.conftest import Running, daemon_env, start, stop
from tests.transfer.conftest import StoreEnv

MEMORIES = [
    ("The spare key is under the blue stone", ["home"]),
    ("Standups are at 9:30 on weekdays", ["work"]),
    ("The cat is called Pimenta", ["home", "pets"]),
]


async def test_export_streams_and_import_restores(
    daemon: Running,
    tmp_path: Path,
    short_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    store_env: StoreEnv,
) -> None:
    # Small batches, so even this store goes out in several notifications.
    monkeypatch.setattr(transfer, "BATCH_BYTES", 300)
    notes = tmp_path / "n.md"
    notes.write_text("# Kitchen\n\nThe kettle descaler is in the drawer under the sink.\n")
    async with daemon.client() as aio:
        for text, tags in MEMORIES:
            await aio.remember(text, tags=tags, importance=0.7)
        await aio.ingest(notes)
        out = io.StringIO()
        reports: list[dict[str, Any]] = []
        result = await aio.export(out.write, vectors=True, on_progress=reports.append)
        # The blocking client writes the same lines.
        with Client(daemon.socket) as sync:
            again = io.StringIO()
            await asyncio.to_thread(sync.export, again.write, vectors=True)
        expected = [await aio.search(q, limit=3) for q in ("spare key", "kettle descaler")]
    lines = out.getvalue().splitlines()
    assert len(reports) > 3 and all("lines" not in r for r in reports)
    assert reports[-1]["sent"] == result["lines"] == len(lines)
    assert result["counts"]["documents"] == 4 and result["counts"]["chunks"] == 4
    assert json.loads(lines[0])["type"] == "header" and json.loads(lines[-1])["type"] == "footer"
    # Line for line the same, but for the header's time stamp.
    assert again.getvalue().splitlines()[1:] == lines[1:]

    dump = tmp_path / "dump.jsonl"
    dump.write_text(out.getvalue())
    other_home = tmp_path / "other"
    other_home.mkdir()
    env = daemon_env(other_home, short_dir / "o.sock", **store_env())
    server, task = await start(env)
    try:
        target = Running(server, task, short_dir / "o.sock", other_home, env)
        async with target.client() as aio:
            progress: list[dict[str, Any]] = []
            report = await aio.import_file(dump, on_progress=progress.append)
            assert report["documents"]["imported"] == 4 and report["vectors_reused"] == 4
            assert progress and progress[-1]["documents"] == 4
            got = [await aio.search(q, limit=3) for q in ("spare key", "kettle descaler")]
            for a, b in zip(got, expected, strict=True):
                assert [(h["source"], h["text"], h["tags"]) for h in a["hits"]] == [
                    (h["source"], h["text"], h["tags"]) for h in b["hits"]
                ]
            again_report = await aio.import_file(dump)
            assert again_report["documents"]["unchanged"] == 4 and again_report["chunks"] == 0
            assert (await aio.status())["counts"]["documents"] == 4

            with pytest.raises(ProtocolError, match="absolute"):
                await aio.call("import", {"path": "dump.jsonl"})
            with pytest.raises(NotFoundError):
                await aio.import_file(tmp_path / "missing.jsonl")
            bad = tmp_path / "bad.jsonl"
            bad.write_text(out.getvalue().replace('"type":"chunks"', '"type":"chunk"', 1))
            with pytest.raises(ParseError, match=r"line \d+: unknown type 'chunk'") as caught:
                await aio.import_file(bad)
            assert caught.value.data["line"] > 1
            # The daemon is still there.
            assert (await aio.status())["state"] == "ready"
    finally:
        assert await stop(server, task) == 0


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    captured = capsys.readouterr()
    return int(exit_info.value.code or 0), captured.out, captured.err


async def test_cli_through_the_daemon(
    daemon: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with daemon.client() as aio:
        await aio.remember("The boat is moored at pier 4", tags=["boat"])
    sets = ["--set", f"daemon.socket={daemon.socket}"]
    code, out, err = await asyncio.to_thread(run_cli, ["export", *sets], capsys)
    assert code == 0 and "exported 1 documents, 1 chunks" in err
    assert [json.loads(line)["type"] for line in out.splitlines()][1:] == [
        "documents",
        "chunks",
        "footer",
    ]
    path = tmp_path / "backup.jsonl"
    code, out, _ = await asyncio.to_thread(run_cli, ["export", str(path), "--json", *sets], capsys)
    assert code == 0 and json.loads(out)["counts"]["chunks"] == 1
    # Written under a temporary name, then renamed: no temporary file is left behind.
    assert path.read_text().count("\n") == 4
    assert [n for n in os.listdir(tmp_path) if "backup" in n] == ["backup.jsonl"]
    code, out, _ = await asyncio.to_thread(run_cli, ["import", str(path), "--json", *sets], capsys)
    assert code == 0 and json.loads(out)["documents"]["unchanged"] == 1


def test_cli_offline_round_trip(
    isolated_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from recalld.api import Memory
    from recalld.config import load_settings

    model = ["--set", "embed.model=hash:64"]
    settings = load_settings(None, {"RECALLD_HOME": str(isolated_home)}, {"embed.model": "hash:64"})
    with Memory(settings.settings) as memory:
        memory.remember("Offline: the generator manual is in the garage", tags=["manuals"])
    path = tmp_path / "x.jsonl"
    code, _, err = run_cli(["export", str(path), "--offline", "--vectors"], capsys)
    assert code == 0, err
    assert '"vector":' in path.read_text()
    fresh = tmp_path / "fresh.db"
    code, out, err = run_cli(
        ["import", str(path), "--offline", "--json", "--set", f"store.path={fresh}", *model],
        capsys,
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["documents"]["imported"] == 1 and report["vectors_reused"] == 1
    other = load_settings(
        None,
        {"RECALLD_HOME": str(isolated_home)},
        {"embed.model": "hash:64", "store.path": str(fresh)},
    )
    with Memory(other.settings) as memory:
        hits = memory.search("generator manual").hits
        assert hits and hits[0].chunk.tags == ("manuals",)
    # A malformed file: exit 1 and the line named.
    bad = tmp_path / "bad.jsonl"
    bad.write_text(path.read_text().replace('"type":"footer"', '"type":"fotter"'))
    code, _, err = run_cli(
        ["import", str(bad), "--offline", "--set", f"store.path={tmp_path / 'f2.db'}", *model],
        capsys,
    )
    assert code == 1 and "bad.jsonl line 4: unknown type 'fotter'" in err
    # Nothing to export: a clear error.
    code, _, err = run_cli(
        ["export", "--offline", "--set", f"store.path={tmp_path / 'none.db'}"], capsys
    )
    assert code == 1 and "no store at" in err

"""Issue 16, "Done when": a real project folder behind `recalld sources add`, a real daemon, the
real CLI and the real MCP server (through the `mcp` package's client). Secret files and ignored
trees stay out, inline keys and tokens are redacted, a symlink out of the folder is not
followed: no search over the CLI or MCP returns anything secret."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult

from tests.integration.conftest import Daemon

pytestmark = pytest.mark.integration

# Made-up credentials in their providers' formats.
AWS_ID = "AKIAQ3EGRTX7NLZW4P6K"
AWS_SECRET = "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"
GITHUB = "ghp_R7u2Kq9Xw4Zt1Lm8Nb3Vc6Hj5Gf0Ds2Ay7Pe"
DB_PASSWORD = "pgPassw0rdQuokka"
KEY_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"
OUTSIDE_WORD = "zebrafishpasswd"  # only in the file the symlink points to
SECRET_VALUES = (AWS_ID, AWS_SECRET, GITHUB, DB_PASSWORD, KEY_BODY, OUTSIDE_WORD)
# What a curious agent would search for: the secrets' names, and the values themselves.
QUERIES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "GITHUB_TOKEN",
    "DATABASE_URL password",
    "OPENSSH PRIVATE KEY",
    "id_ed25519",
    "postgres cutover",
    "root passwd zebrafish",
    *SECRET_VALUES,
)


def make_project(root: Path, outside: Path) -> None:
    def write(relative: str, text: str) -> None:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    write(".gitignore", "build/\n*.log\n")
    write("build/bundle.js", "// postgres cutover bundle, generated\nvar cutover = 1;\n")
    write("logs/app.log", "postgres cutover started\n")
    write(
        ".env",
        f"DATABASE_URL=postgres://app:{DB_PASSWORD}@db.internal/app\n"
        f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}\n",
    )
    write(
        "secrets/id_ed25519",
        f"-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_BODY}\n-----END OPENSSH PRIVATE KEY-----\n",
    )
    write(".aws/credentials", f"[default]\naws_access_key_id = {AWS_ID}\n")
    write(
        "deploy/settings.py",
        '"""Deploy settings for the postgres cutover."""\n\n'
        f'AWS_ACCESS_KEY_ID = "{AWS_ID}"\n'
        f'GITHUB_TOKEN = "{GITHUB}"\n'
        f'DATABASE_URL = "postgres://app:{DB_PASSWORD}@db.internal/app"\n\n\n'
        "def region():\n    return 'eu-west-1'\n",
    )
    write("notes.md", "# Plans\n\nThe postgres cutover is on Thursday at 06:00, Ana leads it.\n")
    outside.mkdir(parents=True)
    (outside / "passwd.md").write_text(f"root:x:0:0 {OUTSIDE_WORD}\n")
    (root / "passwd.md").symlink_to(outside / "passwd.md")


FORBIDDEN_FILES = (".env", "id_ed25519", "credentials", "bundle.js", "app.log", "passwd.md")


def assert_nothing_secret(hits: list[dict[str, Any]], query: str) -> None:
    for hit in hits:
        assert not hit["source"].endswith(FORBIDDEN_FILES), (query, hit["source"])
        for value in SECRET_VALUES:
            assert value not in hit["text"], (query, hit["source"])
            assert value not in json.dumps(hit.get("meta", {})), (query, hit["source"])


def cli(daemon: Daemon, *args: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-m", "recalld", *args, "--json"],
        env=daemon.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


async def test_a_project_folder_gives_nothing_secret_away(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    make_project(project, tmp_path / "elsewhere")
    daemon = make_daemon()
    daemon.start()
    daemon.wait_ready()
    try:
        added = cli(daemon, "sources", "add", str(project))
        assert added["path"] == str(project.resolve())
        status = daemon.wait_for(lambda s: s["counts"]["documents"] >= 3)
        stored = {
            d.removeprefix(f"{project.resolve()}/")
            for d in daemon.search_sources("postgres cutover", limit=50)
        }
        # Only the notes, the code and the ignore file went in.
        assert stored <= {"notes.md", "deploy/settings.py", ".gitignore"}, stored
        assert status["counts"]["documents"] == 3, status["counts"]
        assert status["redacted_chunks"] >= 1

        for query in QUERIES:
            result = cli(daemon, "search", query, "--limit", "20")
            assert_nothing_secret(result["hits"], query)
            keyword = daemon.client.search(query, mode="bm25", limit=20)
            assert_nothing_secret(keyword["hits"], query)
        # The names stay findable, with the value replaced and recorded.
        found = cli(daemon, "search", "GITHUB_TOKEN", "--mode", "bm25", "--explain")
        [settings] = [h for h in found["hits"] if h["source"].endswith("settings.py")]
        assert "[REDACTED:github_token]" in settings["text"]
        assert {"aws_access_key", "github_token", "url_password"} <= {
            r["type"] for r in settings["meta"]["redacted"]
        }
        assert cli(daemon, "search", "cutover Thursday")["hits"][0]["source"].endswith("notes.md")

        params = StdioServerParameters(
            command=sys.executable, args=["-m", "recalld", "mcp"], env=daemon.env
        )
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            for query in QUERIES:
                result = await session.call_tool("search", {"query": query, "limit": 20})
                assert isinstance(result, CallToolResult) and not result.is_error
                data = result.structured_content
                assert isinstance(data, dict)
                assert_nothing_secret(data["hits"], query)
                for value in SECRET_VALUES:
                    assert all(value not in block.model_dump_json() for block in result.content)
            mcp_status = await session.call_tool("status", {})
            assert isinstance(mcp_status.structured_content, dict)
            assert mcp_status.structured_content["redacted_chunks"] >= 1

        # `forget PATH` sticks: the notes leave, and a touch does not bring them back.
        assert cli(daemon, "forget", str(project / "notes.md"))["forgotten"] == 1
        (project / "notes.md").write_text("# Plans\n\nThe postgres cutover moved to Friday.\n")
        (project / "later.md").write_text("# Later\n\nA quokka note written after the forget.\n")
        daemon.wait_for(lambda s: s["counts"]["documents"] == 3)  # settings, .gitignore, later
        assert daemon.search_sources("quokka") == [str((project / "later.md").resolve())]
        assert daemon.search_sources("cutover Friday Thursday") == [
            str((project / "deploy" / "settings.py").resolve())
        ]
    finally:
        assert daemon.stop() == 0


def test_unsupported_files_are_skipped_not_errors(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    """`.gz`, images, `.so`, `.whl`, `.sqlite` and an ELF binary: skipped by type in `ingest`,
    `status` and `sources list`, not in `errors`, `ingest` exits 0, a restart tries none again."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "notes.md").write_text("The heron nests by the mill pond.\n")
    for name, head in (
        ("logs.gz", b"\x1f\x8b\x08\x00"),
        ("photo.png", b"\x89PNG\r\n\x1a\n"),
        ("libfoo.so", b"\x7fELF\x02\x01\x01"),
        ("pkg-1.0-py3-none-any.whl", b"PK\x03\x04"),
        ("cache.sqlite", b"SQLite format 3\x00"),
        ("a.out", b"\x7fELF\x02\x01\x01\x00"),
        ("tool", b"\x7fELF\x02\x01\x01\x00"),
    ):
        (folder / name).write_bytes(head + bytes(range(256)) * 8)
    daemon = make_daemon()
    daemon.start()
    daemon.wait_ready()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "recalld", "ingest", str(folder)],
            env=daemon.env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "1 ingested" in done.stdout and "7 skipped" in done.stdout, done.stdout
        report = cli(daemon, "ingest", str(folder))  # again: all unchanged or skipped
        assert report["failed"] == 0 and report["skipped"] == 7 and report["ingested"] == 0
        assert report["skipped_types"] == {
            ".gz": 1,
            ".png": 1,
            ".so": 1,
            ".whl": 1,
            ".sqlite": 1,
            ".out": 1,
            "binary": 1,
        }
        assert cli(daemon, "errors") == []
        status = cli(daemon, "status")
        assert status["errors"] == 0 and sum(status["skipped"].values()) == 7
        text = subprocess.run(
            [sys.executable, "-m", "recalld", "status"],
            env=daemon.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "7 unsupported files" in text
        # Watched: the source's counts say so, and a restart looks at none of them again.
        cli(daemon, "sources", "add", str(folder))
        daemon.wait_for(lambda s: s["pending"] == 0)
        listed = {s["path"]: s for s in cli(daemon, "sources", "list")}
        assert sum(listed[str(folder.resolve())]["skipped"].values()) == 7
        assert daemon.stop() == 0
        daemon.start()
        daemon.wait_ready()
        after = daemon.wait_for(lambda s: s["pending"] == 0)
        assert after["ingested"]["files"] == 0 and after["errors"] == 0
    finally:
        daemon.stop()


def test_a_watched_subfolder_honours_the_repositorys_gitignore(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    """`sources add` of a folder inside a git repository: the `.gitignore` at the
    repository's root applies, by the walk and by later file events."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("*.log\ndocs/scratch/\n/readme.md\n")
    docs = repo / "docs"
    (docs / "scratch").mkdir(parents=True)
    (docs / "plan.md").write_text("# Plan\n\nThe quokka migration starts in May.\n")
    (docs / "readme.md").write_text("# Readme\n\nThe quokka readme of the docs folder.\n")
    (docs / "debug.log").write_text("quokka debug trace\n")
    (docs / "scratch" / "idea.md").write_text("# Idea\n\nA quokka scratch idea.\n")
    daemon = make_daemon()
    daemon.start()
    daemon.wait_ready()
    try:
        cli(daemon, "sources", "add", str(docs))
        daemon.wait_for(lambda s: s["counts"]["documents"] >= 2)
        wanted = {str((docs / n).resolve()) for n in ("plan.md", "readme.md")}
        assert set(daemon.search_sources("quokka", limit=20)) == wanted
        # A file the repository's .gitignore ignores, written later, stays out too.
        (docs / "later.log").write_text("quokka later trace\n")
        (docs / "later.md").write_text("# Later\n\nA later quokka note.\n")
        daemon.wait_for(lambda s: s["counts"]["documents"] >= 3)
        assert set(daemon.search_sources("quokka", limit=20)) == {
            *wanted,
            str((docs / "later.md").resolve()),
        }
    finally:
        assert daemon.stop() == 0

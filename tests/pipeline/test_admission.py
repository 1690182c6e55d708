"""What may enter (issue 16): ignore files, excludes, the secret deny-list and symlinks, through
the real walk and the real scheduler on a real store (hash embedder)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pathspec
import pytest

from recalld.api import AsyncMemory
from recalld.config import PrivacySettings, load_settings
from recalld.errors import ConfigError
from recalld.ingest.admission import Admission, Matcher, Scope, denied
from recalld.ingest.scheduler import Job, Scheduler
from recalld.ingest.watcher import PathFilter, WatchedSource, walk


@pytest.fixture
async def memory(isolated_home: Path) -> AsyncIterator[AsyncMemory]:
    settings = load_settings(
        None, {"RECALLD_HOME": str(isolated_home), "RECALLD_EMBED__MODEL": "hash:64"}
    ).settings
    async with await AsyncMemory.open(settings) as opened:
        yield opened


def write(path: Path, text: str = "some text\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def project(root: Path) -> Path:
    """A project folder with everything that should stay out, and a few notes."""
    write(root / ".gitignore", "build/\n*.log\n!keep.log\n")
    write(root / "build" / "out.txt")
    write(root / "app.log")
    write(root / "keep.log")
    write(root / "notes.md")
    write(root / "src" / "main.py", "print('hi')\n")
    write(root / "src" / ".gitignore", "generated.py\n")
    write(root / "src" / "generated.py")
    write(root / "docs" / ".ignore", "draft-*\n")
    write(root / "docs" / "draft-1.md")
    write(root / "docs" / "final.md")
    write(root / "docs" / ".recalldignore", "private/\n")
    write(root / "docs" / "private" / "diary.md")
    write(root / ".env", "DB_PASSWORD=hunter2\n")
    write(root / ".env.local", "X=1\n")
    write(root / "secrets" / "id_ed25519", "-----BEGIN OPENSSH PRIVATE KEY-----\n")
    write(root / "certs" / "server.pem")
    write(root / ".aws" / "credentials", "[default]\n")
    write(root / "home" / ".netrc", "machine x login y password z\n")
    write(root / "home" / ".ssh" / "config", "Host x\n")
    write(root / "home" / ".zsh_history", "export TOKEN=abc\n")
    return root


async def walked(root: Path, scope: Scope) -> list[str]:
    return sorted([f.path.relative_to(root).as_posix() async for f in walk(root, None, scope)])


async def test_walk_honours_ignore_files_and_the_deny_list(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    admission = Admission(PrivacySettings())
    assert await walked(root, admission.scope(root)) == [
        ".gitignore",
        "docs/.ignore",
        "docs/.recalldignore",
        "docs/final.md",
        "keep.log",
        "notes.md",
        "src/.gitignore",
        "src/main.py",
    ]
    # Switched off, only the deny-list is left.
    loose = Admission(PrivacySettings(ignore_files=False))
    found = await walked(root, loose.scope(root))
    assert "build/out.txt" in found and "docs/private/diary.md" in found
    assert not any(".env" in f or "id_ed25519" in f or "credentials" in f for f in found)
    # allow_secrets lets the deny-listed files in (an explicit user choice).
    assert ".env" in await walked(root, admission.scope(root, allow_secrets=True))


async def test_excludes_from_config_source_and_request_win_over_negations(
    tmp_path: Path,
) -> None:
    root = project(tmp_path / "p")
    admission = Admission(PrivacySettings(exclude=("*.md",)))
    found = await walked(root, admission.scope(root, ["src/", "keep.log"]))
    assert found == [".gitignore", "docs/.ignore", "docs/.recalldignore"]


def test_deny_list_matches_at_any_depth_and_not_ordinary_files() -> None:
    for path in (
        "/h/.env",
        "/h/p/.env.production",
        "/h/.ssh/known_hosts",
        "/h/.aws/credentials",
        "/h/p/.git/config",
        "/h/key.p12",
        "/h/.bash_history",
        "/h/p/id_rsa",
    ):
        assert denied(path), path
    for path in ("/h/notes.md", "/h/environment.md", "/h/p/src/keys.py", "/h/aws/readme.md"):
        assert not denied(path), path


@pytest.mark.parametrize(
    "lines",
    [
        ["build/", "*.log", "!keep.log", "/top.txt", "docs/**/draft*", "a/b/c"],
        ["*.md", "!/README.md", "**/cache", "x?z", "[ab]*.py"],
    ],
)
def test_matcher_agrees_with_pathspec(lines: list[str]) -> None:
    """The one-regex pre-check never changes an answer."""
    matcher = Matcher(lines)
    spec = pathspec.GitIgnoreSpec.from_lines(lines)
    paths = [
        "build/",
        "build/x.o",
        "src/build/y",
        "app.log",
        "keep.log",
        "sub/keep.log",
        "top.txt",
        "sub/top.txt",
        "docs/a/b/draft1.md",
        "docs/draft.md",
        "a/b/c",
        "x/a/b/c",
        "README.md",
        "sub/README.md",
        "cache",
        "p/cache/",
        "xyz",
        "xz",
        "a1.py",
        "c1.py",
        "plain.txt",
    ]
    for path in paths:
        assert matcher.check(path) == spec.check_file(path).include, path


async def test_symlinks_are_followed_only_inside_the_watched_folders(tmp_path: Path) -> None:
    root = tmp_path / "p"
    outside = write(tmp_path / "elsewhere" / "passwd.txt", "root:x:0:0\n")
    inside = write(root / "real.md")
    other_root = write(tmp_path / "other" / "shared.md")
    (root / "out.md").symlink_to(outside)
    (root / "in.md").symlink_to(inside)
    (root / "other.md").symlink_to(other_root)
    (root / "key.md").symlink_to(write(root / "k" / "id_rsa"))
    admission = Admission(PrivacySettings(), roots=lambda: [tmp_path / "other"])
    assert await walked(root, admission.scope(root)) == ["in.md", "other.md", "real.md"]
    never = Admission(PrivacySettings(symlinks="never"))
    assert await walked(root, never.scope(root)) == ["real.md"]
    everything = Admission(PrivacySettings(symlinks="all"))
    assert await walked(root, everything.scope(root)) == [
        "in.md",
        "other.md",
        "out.md",
        "real.md",
    ]
    with pytest.raises(ConfigError, match=r"privacy\.symlinks"):
        Admission(PrivacySettings(symlinks="sometimes"))


async def stored(memory: AsyncMemory, root: Path) -> list[str]:
    docs = await memory.store.read(lambda c: c.documents(str(root)))
    return sorted(Path(d.source).relative_to(root).as_posix() for d in docs)


async def test_scheduler_keeps_ignored_and_secret_files_out(
    memory: AsyncMemory, tmp_path: Path
) -> None:
    root = project(tmp_path / "p")
    (root / "leak.md").symlink_to(write(tmp_path / "elsewhere" / "passwd.txt"))
    scheduler = Scheduler(memory.ingestor, PathFilter(), debounce=0.01)
    scheduler.sources = (WatchedSource(root, "auto", "runtime", ("docs/final.md",)),)
    jobs: list[Job] = []

    async def put(job: Job) -> None:
        jobs.append(job)

    await scheduler.reconcile(root, put)
    await scheduler.process(jobs)
    assert await stored(memory, root) == [
        ".gitignore",
        "docs/.ignore",
        "docs/.recalldignore",
        "keep.log",
        "notes.md",
        "src/.gitignore",
        "src/main.py",
    ]
    # Watcher events for what is kept out ingest nothing (the symlink, a file seen through a
    # linked folder that leads out, the build tree, .env).
    (root / "linked").symlink_to(tmp_path / "elsewhere")
    report = await scheduler.process(
        [
            Job(root / "leak.md"),
            Job(root / "linked" / "passwd.txt"),
            Job(root / "build" / "out.txt"),
            Job(root / ".env"),
        ]
    )
    assert report.files == 0 and report.ingested == 0
    assert "leak.md" not in await stored(memory, root)

    # A rule added later takes out what it now ignores, at the ignore file's own event.
    write(root / ".gitignore", "build/\n*.log\n!keep.log\nnotes.md\n")
    stop = asyncio.Event()
    task = asyncio.create_task(scheduler.run(stop, drain_timeout=5))
    try:
        scheduler.notify(root / ".gitignore", False)
        await asyncio.sleep(0.05)
        await asyncio.wait_for(scheduler.wait_idle(), 10)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert "notes.md" not in await stored(memory, root)


async def test_named_files_bypass_ignore_files_but_not_the_deny_list(
    memory: AsyncMemory, tmp_path: Path
) -> None:
    root = project(tmp_path / "p")
    scheduler = Scheduler(memory.ingestor, PathFilter())
    scheduler.sources = (WatchedSource(root, "auto", "runtime"),)
    report = await scheduler.ingest_now(root / "build" / "out.txt")
    assert report.ingested == 1
    refused = await scheduler.ingest_now(root / ".env")
    assert refused.refused == 1 and refused.ingested == 0
    assert "deny-list" in refused.errors[0]["message"]
    assert refused.errors[0]["path"] == os.fspath(root / ".env")
    allowed = await scheduler.ingest_now(root / ".env", allow_secrets=True)
    assert allowed.ingested == 1
    # A folder ingest honours the folder's rules and the request's excludes.
    folder = await scheduler.ingest_now(root / "docs", exclude=["final.md"])
    assert folder.files == 2  # .ignore and .recalldignore


def repository(root: Path) -> Path:
    """A git repository whose ignore files lie above `docs/notes`, the folder to watch."""
    subprocess.run(["git", "init", "-q", os.fspath(root)], check=True)
    write(root / ".gitignore", "*.log\n/top.md\ndocs/notes/hidden.md\nbuild/\n")
    write(root / "docs" / ".ignore", "*.draft\n")
    for name in ("a.md", "app.log", "top.md", "x.draft", "hidden.md", "sub/hidden.md"):
        write(root / "docs" / "notes" / name)
    write(root / "build" / "out.md")
    return root


async def test_ignore_files_above_a_watched_subfolder_apply_up_to_the_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Above the repository: never read.
    write(tmp_path / ".gitignore", "*.md\n")
    repo = repository(tmp_path / "repo")
    notes = repo / "docs" / "notes"
    admission = Admission(PrivacySettings())
    # Each file's patterns are relative to its own folder: `/top.md` is the repository's
    # top.md only, `docs/notes/hidden.md` that one file, not `sub/hidden.md`.
    assert await walked(notes, admission.scope(notes)) == ["a.md", "sub/hidden.md", "top.md"]
    # A single changed path (the watcher's event) is judged the same way.
    scope = admission.scope(notes)
    assert scope.path_refusal(notes / "app.log") == f"ignored by {repo / '.gitignore'}"
    assert scope.path_refusal(notes / "x.draft") == f"ignored by {repo / 'docs' / '.ignore'}"
    assert scope.path_refusal(notes / "a.md") is None
    # Switched off, no ignore file is read, above or inside.
    loose = Admission(PrivacySettings(ignore_files=False))
    assert len(await walked(notes, loose.scope(notes))) == 6
    # A folder the repository ignores, watched on purpose: only its own rules apply.
    assert await walked(repo / "build", admission.scope(repo / "build")) == ["out.md"]

    # Outside a repository, ignore files above the watched folder are not read.
    plain = tmp_path / "plain"
    write(plain / ".gitignore", "*.log\n")
    write(plain / "sub" / "app.log")
    assert await walked(plain / "sub", admission.scope(plain / "sub")) == ["app.log"]
    # Nor at the user's home, even when it is a (dotfiles) repository.
    home = tmp_path / "home-repo"
    await asyncio.to_thread(subprocess.run, ["git", "init", "-q", os.fspath(home)], check=True)
    write(home / ".gitignore", "*\n")
    write(home / "notes" / "n.md")
    monkeypatch.setenv("HOME", os.fspath(home))
    assert await walked(home / "notes", admission.scope(home / "notes")) == ["n.md"]

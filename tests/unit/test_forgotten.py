"""Forgotten paths (`ingest.forgotten`): what an entry matches, and that the admission check
consults them for walks, changed paths, explicit requests and symlinks."""

from __future__ import annotations

from pathlib import Path

import pytest

from recalld.config import PrivacySettings
from recalld.errors import QueryError
from recalld.ingest.admission import Admission
from recalld.ingest.forgotten import ForgottenPaths, fixed_prefix, normalise
from recalld.ingest.watcher import walk


def test_normalise_and_prefix() -> None:
    assert normalise(" /home/me/big/ ") == "/home/me/big"
    assert normalise("/home/me//big/./**/*.log") == "/home/me/big/**/*.log"
    for bad in ("notes", "~/notes", "/", "//"):
        with pytest.raises(QueryError):
            normalise(bad)
    assert fixed_prefix("/home/me/big") == "/home/me/big"
    assert fixed_prefix("/home/me/big/*.log") == "/home/me/big/"
    assert fixed_prefix("/home/me/b*/x") == "/home/me/"


def test_entries_match_files_folders_and_globs() -> None:
    kept = ForgottenPaths(["/home/me/big", "/home/me/logs/*.log", "/home/me/**/build"])
    assert kept.match("/home/me/big") == "/home/me/big"
    assert kept.match("/home/me/big/deep/a.md") == "/home/me/big"
    assert kept.match("/home/me/bigger/a.md") is None
    assert kept.match("/home/me/logs/app.log") == "/home/me/logs/*.log"
    assert kept.match("/home/me/logs/old/app.log") is None
    assert kept.match("/home/me/x/y/build/out.md") == "/home/me/**/build"
    kept.remove("/home/me/big")
    assert kept.match("/home/me/big/deep/a.md") is None
    refusal = kept.refusal("/home/me/logs/app.log")
    assert refusal is not None and "recalld unforget /home/me/logs/*.log" in refusal


async def test_admission_consults_the_forgotten_paths(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / "keep").mkdir(parents=True)
    (root / "gone").mkdir()
    for path in (root / "keep" / "a.md", root / "gone" / "b.md", root / "c.md"):
        path.write_text("x")
    (root / "keep" / "link.md").symlink_to(root / "c.md")
    kept = ForgottenPaths([str(root / "gone"), str(root / "c.md")])
    admission = Admission(PrivacySettings(), roots=lambda: [root], forgotten=kept)
    scope = admission.scope(root)
    walked = [state.path async for state in walk(root, scope=scope)]
    assert walked == [root / "keep" / "a.md"]  # not the folder, the file, nor a link to it
    assert scope.path_refusal(root / "gone" / "b.md") is not None
    assert admission.explicit_refusal(root / "c.md", allow_secrets=True) is not None
    kept.remove(str(root / "c.md"))
    assert admission.explicit_refusal(root / "c.md") is None

"""The Neovim plugin (editors/nvim) run headless against a real daemon: `:Recall` finds a
remembered text and an ingested file (with its line) through the quickfix list,
`:RecallRemember` stores a selection, `:RecallStatus` answers.

Needs `nvim` (`apt-get install neovim`; .ci/run installs it). Without it the test is skipped
locally and fails in CI (`CI` set), so CI never passes without running it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.conftest import Daemon

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "editors" / "nvim"


def nvim() -> str:
    found = shutil.which("nvim")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("nvim is not installed, and CI must run the Neovim test (see .ci/run)")
    pytest.skip("nvim is not installed (apt-get install neovim); CI installs it and runs this")


def test_recall_remember_and_status_from_neovim(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    program = nvim()
    daemon = make_daemon()
    daemon.start()
    daemon.wait_ready()
    try:
        daemon.client.remember("The lighthouse keeper's boat is moored at pier seven")
        notes = tmp_path / "notes.md"
        notes.write_text(
            "# Harbour\n\nFerries leave at dawn.\n\n"
            "## Boats\n\nThe lighthouse keeper's dinghy is painted red.\n"
        )
        daemon.client.ingest(notes)
        out = tmp_path / "nvim-out.json"
        env = {
            **daemon.env,
            "RECALLD_TEST_OUT": str(out),
            "RECALLD_TEST_QUERY": "lighthouse keeper boat",
            "HOME": str(tmp_path),  # no user config or shada
        }
        proc = subprocess.run(
            [
                program,
                "--headless",
                "-u",
                "NONE",
                "-i",
                "NONE",
                "--cmd",
                f"set rtp^={PLUGIN}",
                "-c",
                "runtime plugin/recalld.lua",
                "-c",
                f"luafile {PLUGIN / 'tests' / 'recall_test.lua'}",
            ],
            env=env,
            capture_output=True,
            timeout=90,
        )
        assert out.exists(), proc.stderr.decode()
        result = json.loads(out.read_text())
        assert proc.returncode == 0 and result["ok"], result
        texts = [item["text"] for item in result["quickfix"]]
        assert any("[memory:" in t and "pier seven" in t for t in texts), texts
        dinghy = [i for i in result["quickfix"] if "dinghy" in i["text"]]
        assert dinghy and dinghy[0]["filename"] == str(notes), result["quickfix"]
        # The line its chunk starts at: the "## Boats" heading above the paragraph.
        assert notes.read_text().splitlines()[dinghy[0]["lnum"] - 1] == "## Boats"
        assert result["title"] == "Recall: lighthouse keeper boat"
        assert "remembered as" in result["remembered"]
        assert "ready" in result["status"] and "chunks" in result["status"]
        hits = daemon.client.search("cormorant deploy key", mode="bm25")["hits"]
        assert hits[0]["text"] == (
            "The cormorant deploy key rotates every ninety days\nand lives in the ops vault."
        )
    finally:
        daemon.stop()

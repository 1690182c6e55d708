"""A setting that takes one of a fixed set of words (issue 13, item 4): a bad value in the
environment, the config file or a `--set` flag stops `recalld serve` at start-up, at once, with
one line naming the setting, the value and the choices, and exit 3 (the systemd unit's "do not
restart": it would fail the same way again)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

STARTUP_FAILURE = 3


def serve(
    home: Path, *args: str, **env_extra: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RECALLD_", "XDG_"))}
    env.update(
        RECALLD_HOME=str(home),
        RECALLD_EMBED__MODEL="hash:64",
        RECALLD_DAEMON__SOCKET=str(home / "s.sock"),
        **env_extra,
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "recalld", "serve", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, time.monotonic() - started


def assert_refused(done: subprocess.CompletedProcess[str], key: str, value: str) -> str:
    assert done.returncode == STARTUP_FAILURE, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if key in line]
    assert len(lines) == 1, done.stderr
    assert repr(value) in lines[0], lines[0]
    return lines[0]


def test_a_bad_choice_in_the_environment_stops_serve(tmp_path: Path) -> None:
    done, took = serve(tmp_path, RECALLD_SEARCH__MODE="hybird")
    line = assert_refused(done, "search.mode", "hybird")
    assert "hybrid, vector, bm25" in line and "env" in line, line
    assert took < 30, took  # at once: no model loaded, no store opened
    assert not (tmp_path / "data" / "recalld.db").exists()


def test_a_bad_choice_in_the_config_file_stops_serve(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[search]\nfusion = "rff"\n')
    done, _ = serve(tmp_path, "--config", str(config))
    line = assert_refused(done, "search.fusion", "rff")
    assert "score, rrf" in line and str(config) in line, line


def test_a_bad_choice_in_a_set_flag_stops_serve(tmp_path: Path) -> None:
    done, _ = serve(tmp_path, "--set", "privacy.symlinks=always")
    line = assert_refused(done, "privacy.symlinks", "always")
    assert "inside, never, all" in line and "--set" in line, line


@pytest.mark.parametrize(
    ("variable", "value", "key"),
    [
        ("RECALLD_LINKS__GRANULARITIES", "fact,sentence", "links.granularities"),
        ("RECALLD_STORE__VECTOR_INDEX", "ivfflat", "store.vector_index"),
    ],
)
def test_other_choices_stop_serve_too(tmp_path: Path, variable: str, value: str, key: str) -> None:
    done, _ = serve(tmp_path, **{variable: value})
    assert_refused(done, key, value.split(",")[-1])

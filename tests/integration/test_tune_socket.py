"""`tune` over the daemon's socket and from the command line, on the real packaged model."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from recalld.client import Client
from recalld.errors import ConfigError
from recalld.tune import run
from tests.integration.conftest import Daemon
from tests.tune.corpus import notes

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.model,
    pytest.mark.timeout(600),
]


def test_tune_over_the_socket_dry_run_then_a_refused_run(
    make_daemon: Callable[..., Daemon], model_cache: Path
) -> None:
    daemon = make_daemon(RECALLD_EMBED__MODEL="local", RECALLD_CACHE_DIR=str(model_cache))
    daemon.start()
    drop = Path(daemon.wait_ready(timeout=120)["drop_folder"])
    for name, text in notes(40).items():
        (drop / name).write_text(text)
    daemon.wait_for(lambda s: s["counts"]["documents"] == 40, timeout=300)

    done = subprocess.run(
        [sys.executable, "-m", "recalld", "tune", "--dry-run", "--json"],
        env=daemon.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    dry = json.loads(done.stdout)
    assert dry["dry_run"] and dry["base"] == "local"
    assert dry["mining"]["pseudo_queries"] > 0 and dry["mining"]["eval_queries"] > 0

    # No training steps: the rebuilt model is the current one, so the gate must refuse it.
    notes_seen: list[dict[str, Any]] = []
    with Client(daemon.socket, timeout=300) as client:
        result = client.tune(max_steps=0, on_progress=notes_seen.append)
        assert not result["gate"]["accepted"] and "model" not in result
        assert result["gate"]["mrr_after"] <= result["gate"]["mrr_before"]
        assert {n.get("phase") for n in notes_seen} >= {"mining", "building", "gate"}
        kinds = {m["kind"] for m in client.models()["models"]}
        assert "tuned" not in kinds
    assert daemon.client.status()["model"].startswith("minilm-l6-v2/")
    assert daemon.stop() == 0


def test_only_a_local_model_can_be_tuned(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="refines the local model"):
        run.base_of("hash:64", tmp_path)

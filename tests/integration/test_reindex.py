"""`recalld reindex` against a real daemon process: killed half-way and resumed, with searches
answered throughout (on SQLite and on PostgreSQL); the switch; the next start; cancel; refusal;
status; `recalld models`."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from recalld.client import Client
from recalld.embeddings.base import HashEmbedder
from recalld.errors import ReindexError
from tests.helpers.fake_openai import FakeOpenAI, Reply
from tests.integration.conftest import Daemon

pytestmark = [pytest.mark.integration]

CHUNKS = 400


def text(i: int) -> str:
    """Twelve pseudo-words per note: every note distinct under any hash model."""
    rng = random.Random(i)
    return " ".join(f"t{rng.randrange(3000)}" for _ in range(12))


QUERY = " ".join(text(7).split()[:7])


def similarity(dimension: int, half: bool = False) -> float:
    """The query's similarity to note 7; `half`: as PostgreSQL's `halfvec` computes it."""
    q, d = HashEmbedder(dimension).embed([QUERY, text(7)])
    if half:
        q, d = (v.astype(np.float16).astype(np.float32) for v in (q, d))
        return round(float(q @ d / (np.linalg.norm(q) * np.linalg.norm(d))), 4)
    return round(float(q @ d), 4)


OLD, NEW = similarity(64), similarity(32)


def fill(daemon: Daemon, n: int = CHUNKS) -> None:
    for i in range(n):
        daemon.client.remember(text(i))


def staged(daemon: Daemon) -> tuple[int, dict[str, str]]:
    """Read the store directly (the daemon is dead): staged vectors and `meta`."""
    url = daemon.env.get("RECALLD_STORE__PATH", "")
    if url.startswith("postgresql://"):
        with psycopg.connect(url) as pg:
            count = pg.execute("SELECT count(*) FROM reindex_vectors").fetchone()[0]  # type: ignore[index]
            meta = {str(k): str(v) for k, v in pg.execute("SELECT key, value FROM meta")}
            return int(count), meta
    conn = sqlite3.connect(daemon.home / "data" / "recalld.db")
    try:
        count = conn.execute("SELECT count(*) FROM reindex_vectors").fetchone()[0]
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    finally:
        conn.close()
    return int(count), meta


class Searching:
    """A thread searching over its own connection until stopped: answers and errors."""

    def __init__(self, socket: Path) -> None:
        self.client = Client(socket, timeout=30)
        self.similarities: list[float] = []
        self.latencies: list[float] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            try:
                found = self.client.search(QUERY, mode="vector", limit=5, explain=True)
                self.latencies.append(time.perf_counter() - t0)
                self.similarities.append(found["explain"]["best_similarity"])
            except Exception as exc:  # collected; the test asserts there are none
                self.errors.append(exc)

    def __enter__(self) -> Searching:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self.client.close()


def wait_until(daemon: Daemon, predicate: Callable[[dict[str, Any]], bool], timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = daemon.client.status()
        if predicate(status):
            return status
        time.sleep(0.01)
    raise AssertionError(f"not reached: {status}\n" + daemon.log.read_text()[-3000:])


def test_reindex_killed_half_way_resumes_with_searches_answered_throughout(
    make_daemon: Callable[..., Daemon], store_env: dict[str, str]
) -> None:
    half = bool(store_env)  # PostgreSQL stores `halfvec`: similarities in half precision
    OLD, NEW = similarity(64, half), similarity(32, half)
    assert OLD != NEW
    # Small batches, so the reindex takes long enough to be killed in the middle.
    daemon = make_daemon(RECALLD_EMBED__BATCH_SIZE="1", **store_env)
    daemon.start()
    daemon.wait_ready()
    fill(daemon)
    with Searching(daemon.socket) as before:
        time.sleep(0.3)
    started = daemon.client.reindex("hash:32", detach=True)
    assert started["detached"] and started["reindex"]["model"] == "hash-32"
    with Searching(daemon.socket) as during:
        status = wait_until(daemon, lambda s: (s["reindex"] or {}).get("done", 0) >= CHUNKS // 4)
        info = status["reindex"]
        assert info["spec"] == "hash:32" and info["dimension"] == 32
        assert info["total"] == CHUNKS and info["started_at"] > 0 and info["rate"] > 0
        # A store half-way through a reindex is sound.
        report = daemon.client.check()
        assert report["ok"], report
        assert daemon.client.status()["model"] == "hash-64"
    daemon.stop(signal.SIGKILL)  # the searches stopped just before: a dead daemon answers none
    assert during.errors == [] and during.similarities
    assert set(during.similarities) == {OLD}  # the old model answered until the kill
    done, meta = staged(daemon)
    assert 0 < done < CHUNKS, "the reindex should have been killed half-way"
    assert meta["model_id"] == "hash-64" and meta["reindex_model_id"] == "hash-32"

    daemon.start()
    daemon.wait_ready()
    with Searching(daemon.socket) as resumed:
        status = wait_until(daemon, lambda s: s["last_reindex"] is not None)
        time.sleep(0.2)  # a few searches on the new model
    assert resumed.errors == []
    last = status["last_reindex"]
    # Nothing done before the kill was embedded again.
    assert last["embedded"] == CHUNKS - done and last["chunks"] == CHUNKS
    assert status["model"] == "hash-32" and status["dimension"] == 32 and status["reindex"] is None
    sims = resumed.similarities
    assert set(sims) <= {OLD, NEW} and sims[-1] == NEW
    assert sims == sorted(sims, key=lambda v: v == NEW)  # old, then new, never back
    report = daemon.client.check()
    assert report["ok"], report
    assert report["counts"]["vectors"] == CHUNKS
    ingested = daemon.client.remember("a new note after the switch t1 t2")
    assert daemon.client.get(ingested["id"])["text"].startswith("a new note")
    found = daemon.client.search(QUERY, mode="vector", explain=True)
    assert found["explain"]["best_similarity"] == NEW
    assert found["hits"][0]["text"] == text(7)
    print(
        f"searches before: {len(before.latencies)}, during: {len(during.latencies)} + "
        f"{len(resumed.latencies)}; p50 before {median(before.latencies) * 1000:.2f} ms, "
        f"during {median(during.latencies) * 1000:.2f} ms"
    )

    # The config names the old model explicitly: the next start refuses, saying what to do.
    assert daemon.stop() == 0
    daemon.start()
    assert daemon.proc is not None and daemon.proc.wait(60) == 3
    assert "embed.model = 'hash:32'" in daemon.log.read_text()
    daemon.proc = None
    # Without a model in the config, the store's recorded model wins.
    daemon.env.pop("RECALLD_EMBED__MODEL")
    daemon.start()
    status = daemon.wait_ready()
    assert status["model"] == "hash-32"
    assert daemon.client.search(QUERY, mode="vector")["hits"][0]["text"] == text(7)
    assert daemon.stop() == 0


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else float("nan")


def test_cancel_refusal_and_status(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(RECALLD_EMBED__BATCH_SIZE="1")
    daemon.start()
    daemon.wait_ready()
    fill(daemon, 200)
    daemon.client.reindex("hash:32", detach=True)
    with pytest.raises(ReindexError, match="under way"):
        daemon.client.reindex("hash:16", detach=True)
    # The same target again is a no-op: it reports the reindex in progress.
    again = daemon.client.reindex("hash:32", detach=True)
    assert again["reindex"]["model"] == "hash-32"
    cancelled = daemon.client.reindex_cancel()
    assert cancelled["cancelled"] and cancelled["model"] == "hash-32"
    status = daemon.client.status()
    assert status["reindex"] is None and status["model"] == "hash-64"
    report = daemon.client.check()
    assert report["ok"], report
    with pytest.raises(ReindexError, match="nothing to cancel"):
        daemon.client.reindex_cancel()
    with pytest.raises(ReindexError, match="already uses"):
        daemon.client.reindex("hash:64")
    # A reindex followed to its end from the command line.
    out = run_cli(daemon, "reindex", "--model", "hash:48", "--json")
    assert out["result"]["model"] == "hash-48" and out["result"]["chunks"] == 200
    assert daemon.client.status()["model"] == "hash-48"
    assert daemon.stop() == 0


def run_cli(daemon: Daemon, *args: str, check: bool = True) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "recalld", *args],
        env=daemon.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check:
        assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_models_and_an_endpoint_target_with_and_without_the_daemon(
    make_daemon: Callable[..., Daemon],
) -> None:
    with FakeOpenAI(dimension=24) as server:
        daemon = make_daemon(RECALLD_EMBED__BATCH_SIZE="1", RECALLD_EMBED__BASE_URL=server.base_url)
        daemon.start()
        daemon.wait_ready()
        fill(daemon, 20)
        live = run_cli(daemon, "models", "--json")
        by_spec = {m["spec"]: m for m in live["models"]}
        assert {"local", "local:fp32", "hash:64", "openai:MODEL"} <= set(by_spec)
        assert by_spec["local"]["dimension"] == 384 and not by_spec["local"]["in_use"]
        assert by_spec["hash:64"]["in_use"] and by_spec["hash:64"]["configured"]
        assert by_spec["openai:MODEL"]["kind"] == "endpoint"
        assert live["store"]["model"] == "hash-64" and live["reindex"] is None
        # The endpoint answers the dimension probe, then stalls: the reindex stays under way.
        server.script("embeddings", Reply(), Reply(delay_s=30))
        started = daemon.client.reindex("openai:fake-embed", detach=True)["reindex"]
        assert started["dimension"] == 24 and started["model"].startswith("openai:fake-embed@")
        live = run_cli(daemon, "models", "--json")
        target = {m["spec"]: m for m in live["models"]}["openai:fake-embed"]
        assert target["reindex_target"] and target["dimension"] == 24 and not target["in_use"]
        daemon.stop(signal.SIGKILL)  # the reindex stays recorded in the store
    offline = run_cli(daemon, "models", "--json")
    assert offline["offline"] and offline["store"] == live["store"]
    by_spec = {m["spec"]: m for m in offline["models"]}
    assert by_spec["openai:fake-embed"]["reindex_target"]
    assert by_spec["openai:fake-embed"]["dimension"] == 24
    assert by_spec["hash:64"]["in_use"]
    # Offline check of a store killed mid-reindex: sound, and it says what is under way.
    checked = run_cli(daemon, "check", "--offline", "--json")
    assert checked["ok"], checked
    assert any(c["name"] == "reindex" and "in progress" in c["detail"] for c in checked["checks"])


def test_sigterm_mid_reindex_stops_cleanly_and_the_next_start_finishes_it(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(RECALLD_EMBED__BATCH_SIZE="1")
    daemon.start()
    daemon.wait_ready()
    fill(daemon, CHUNKS)
    daemon.client.reindex("hash:32", detach=True)
    wait_until(daemon, lambda s: (s["reindex"] or {}).get("done", 0) >= 20)
    assert daemon.stop(signal.SIGTERM) == 0
    done, meta = staged(daemon)
    assert 0 < done < CHUNKS and meta["reindex_spec"] == "hash:32"
    daemon.start()
    daemon.wait_ready()
    # `reindex` without a model follows the resumed one to its end (unless it is over already).
    try:
        result = daemon.client.reindex()["result"]
    except ReindexError:
        result = daemon.client.status()["last_reindex"]
    assert result["model"] == "hash-32" and result["embedded"] <= CHUNKS - done
    assert daemon.client.check()["ok"]
    assert daemon.stop() == 0

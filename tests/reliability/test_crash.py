"""Crash safety (issue 6): `recalld serve` killed with SIGKILL at seeded random moments of a
multi-hundred-file ingest, again and again, while the files change between runs.

After every kill the store, as the crash left it, passes `check`. During the runs a client
searches without pause, and never sees half a document: each file version has a known number
of chunks, and a search for its token finds all of them or none. At the end, after a restart
and an idle wait, every file is searchable exactly once, old versions are gone, and `check` is
clean.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from recalld.client import Client
from recalld.errors import DaemonError
from recalld.storage.registry import check_store
from recalld.storage.sqlite.connection import connect
from tests.integration.conftest import Daemon

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEED = 20240606
FILES = 300
TRIALS = 12
CHANGED_PER_TRIAL = 80


def body(token: str, paragraphs: int) -> str:
    """A note whose every paragraph is one chunk (24-token chunks, no overlap) and carries
    `token`, so a search for the token counts the version's chunks."""
    parts = []
    for p in range(paragraphs):
        words = " ".join(f"{token}w{p}x{j}" for j in range(12))
        parts.append(f"Paragraph {p} of note {token} {words}.")
    return "\n\n".join(parts) + "\n"


@dataclass
class Corpus:
    """The watched folder and what each file should hold."""

    root: Path
    rng: random.Random
    current: dict[Path, tuple[str, int]] = field(default_factory=dict)  # path -> token, chunks
    versions: dict[str, int] = field(default_factory=dict)  # every token ever -> its chunks
    next_id: int = 0

    def write(self, path: Path, version: int) -> None:
        paragraphs = self.rng.randint(1, 4)
        token = f"{path.stem}v{version}"
        path.write_text(body(token, paragraphs))
        self.current[path] = (token, paragraphs)
        self.versions[token] = paragraphs

    def add(self) -> None:
        path = self.root / f"d{self.next_id % 6}" / f"n{self.next_id:04d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.next_id += 1
        self.write(path, 0)

    def mutate(self, changed: int) -> None:
        """Rewrite some files, delete a few and add as many."""
        paths = sorted(self.current)
        for path in self.rng.sample(paths, changed):
            version = int(self.current[path][0].rsplit("v", 1)[1]) + 1
            self.write(path, version)
        for path in self.rng.sample(sorted(self.current), 3):
            path.unlink()
            del self.current[path]
            self.add()


class Searcher(threading.Thread):
    """Searches all the time; records any search that saw part of a document version."""

    def __init__(self, daemon: Daemon, corpus: Corpus, seed: int) -> None:
        super().__init__(daemon=True)
        self.daemon_ = daemon
        self.corpus = corpus
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.searches = 0
        self.complete_hits = 0
        self.violations: list[str] = []

    def run(self) -> None:
        client = Client(self.daemon_.socket, timeout=5)
        db = self.daemon_.home / "data" / "recalld.db"
        try:
            while not self.stop.is_set():
                token = self.rng.choice(sorted(self.corpus.versions))
                try:
                    hits = client.search(token, mode="bm25", limit=50)["hits"]
                except DaemonError:
                    client.close()  # killed or starting: try again shortly
                    time.sleep(0.02)
                    continue
                self.searches += 1
                found = [h for h in hits if token in h["text"]]
                expected = self.corpus.versions[token]
                if found and len(found) != expected:
                    self.violations.append(f"{token}: {len(found)} of {expected} chunks")
                elif found:
                    self.complete_hits += 1
                if db.exists() and self.searches % 10 == 0:
                    self.no_partial_in(db)
        finally:
            client.close()

    def no_partial_in(self, db: Path) -> None:
        # What any reader of the file sees: never a document in the middle of being written.
        conn = connect(db, readonly=True)
        try:
            partial = conn.execute(
                "SELECT count(*) FROM documents WHERE state = 'partial'"
            ).fetchone()[0]
        except Exception:  # the schema may not exist yet right after the first start
            return
        finally:
            conn.close()
        if partial:
            self.violations.append(f"{partial} partial documents visible to a reader")


def wait_for_files(daemon: Daemon, count: int, limit: float = 20) -> int:
    """Poll until this run of the daemon has handled `count` files; return how many it has."""
    deadline = time.monotonic() + limit
    with Client(daemon.socket, timeout=1) as client:
        while time.monotonic() < deadline:
            try:
                done = client.status()["ingested"]
            except DaemonError:
                client.close()  # not serving yet
                time.sleep(0.02)
                continue
            handled = int(done["ingested"] + done["deleted"] + done["unchanged"])
            if handled >= count:
                return handled
            time.sleep(0.01)
    return -1


def test_sigkill_at_random_moments_loses_and_duplicates_nothing(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    corpus = Corpus(tmp_path / "notes", rng)
    for _ in range(FILES):
        corpus.add()
    daemon = make_daemon(
        RECALLD_DAEMON__WATCH=str(corpus.root),
        RECALLD_CHUNK__MAX_TOKENS="24",
        RECALLD_CHUNK__OVERLAP_TOKENS="0",
    )
    searcher = Searcher(daemon, corpus, SEED + 1)
    searcher.start()
    moments: list[str] = []
    mid_ingest = 0
    started = time.monotonic()
    try:
        for trial in range(TRIALS):
            if trial:
                corpus.mutate(CHANGED_PER_TRIAL)
            proc = daemon.start()
            if trial % 2 == 0:
                # Anywhere from start-up (imports, migrations, reconcile) into the ingest.
                moment = f"{rng.uniform(0.1, 1.5):.2f}s"
                time.sleep(float(moment[:-1]))
            else:
                # Part-way through this run's ingest: after a random number of files.
                target = rng.randint(1, CHANGED_PER_TRIAL - 1)
                moment = f"after {wait_for_files(daemon, target)} files"
            state = "not serving yet"
            try:
                with Client(daemon.socket, timeout=1) as probe:
                    status = probe.status()
                state = f"{status['counts']['documents']} docs, {status['pending']} pending"
                mid_ingest += status["pending"] > 0
            except DaemonError:
                mid_ingest += 1
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            daemon.proc = None
            moments.append(f"{moment} ({state})")
            # The store exactly as the crash left it: every invariant holds.
            db = daemon.home / "data" / "recalld.db"
            if db.exists():
                report = check_store(db)
                assert report["ok"], (trial, [c for c in report["checks"] if not c["ok"]])

        daemon.start()
        daemon.wait_ready()
        expected_docs = len(corpus.current)
        daemon.wait_for(lambda s: s["counts"]["documents"] == expected_docs, timeout=60)
        time.sleep(0.3)  # a few more searches against the finished store
    finally:
        searcher.stop.set()
        searcher.join(10)
    elapsed = time.monotonic() - started
    print(
        f"\n{TRIALS} SIGKILL trials in {elapsed:.1f} s, {mid_ingest} while starting or "
        f"ingesting, at: {', '.join(moments)}\n"
        f"searches during the runs: {searcher.searches} ({searcher.complete_hits} found a "
        f"whole version), partial versions seen: {len(searcher.violations)}"
    )
    assert not searcher.violations, searcher.violations[:10]
    assert searcher.searches > 0 and searcher.complete_hits > 0

    # Every file once, whole, at its current version; no older version anywhere.
    client = daemon.client
    status = client.status()
    assert status["counts"]["documents"] == len(corpus.current)
    assert status["counts"]["partial_documents"] == 0 and status["errors"] == 0
    current_tokens = {token for token, _ in corpus.current.values()}
    for path, (token, chunks) in sorted(corpus.current.items()):
        hits = client.search(token, mode="bm25", limit=50)["hits"]
        assert [h["source"] for h in hits if token in h["text"]] == [str(path)] * chunks, token
    for token in sorted(set(corpus.versions) - current_tokens):
        hits = client.search(token, mode="bm25", limit=50)["hits"]
        assert not [h for h in hits if token in h["text"]], f"stale version {token} still found"
    report = client.check()
    assert report["ok"], report
    assert report["counts"]["chunks"] == sum(c for _, c in corpus.current.values())
    print(
        f"checked {len(corpus.current)} documents ({report['counts']['chunks']} chunks) and "
        f"{len(set(corpus.versions) - current_tokens)} superseded versions"
    )
    assert daemon.stop() == 0

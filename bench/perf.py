"""Search speed beside the closest peer (vstash), on the same folder and queries, in one run.

recalld is measured three ways: in-process (`AsyncMemory.search`, as a library user calls
it), over the daemon's socket (`Client.search`) and as a whole `recalld search QUERY --json`
process. vstash runs as a subprocess of its driver (`../shared/peers/vstash/driver.py`,
set up by its `setup.sh`): it is a measuring stick, never imported. The queries are split
into blocks and the systems take turns block by block (the order flipping every block), so
a noisy neighbour on a shared machine slows both alike; ratios are computed from the same
run. Every latency includes the query embedding (each system's query cache is cold).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import metrics
from bench.beir import load_beir
from bench.common import bench_settings, forget_query_vectors, load_model
from recalld.api import AsyncMemory
from recalld.client import Client
from recalld.errors import DaemonError
from recalld.storage.sqlite.store import SqliteStore

K = 10
STAGES = ("embed_ms", "vector_ms", "bm25_ms", "rank_ms", "total_ms")


def select(
    folder: Path, split: str, limit: int | None, docs: int | None
) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    """The first `limit` judged queries and a corpus of `docs` documents that holds every
    document they judge (then the corpus in file order)."""
    corpus, queries, qrels = load_beir(folder, split)
    if limit:
        qrels = dict(list(qrels.items())[:limit])
    if docs and docs < len(corpus):
        wanted = {d for judged in qrels.values() for d in judged if d in corpus}
        for doc_id in corpus:
            if len(wanted) >= docs:
                break
            wanted.add(doc_id)
        corpus = {d: t for d, t in corpus.items() if d in wanted}
    return corpus, {q: queries[q] for q in qrels}, qrels


def write_folder(corpus: dict[str, str], folder: Path) -> None:
    """One `<id>.txt` file per document (kept when the folder already holds the same set)."""
    names = {f"{d}.txt" for d in corpus}
    if folder.is_dir() and {p.name for p in folder.iterdir()} == names:
        return
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for doc_id, text in corpus.items():
        (folder / f"{doc_id}.txt").write_text(text, "utf-8")


def summary(values: list[float]) -> dict[str, float]:
    """p50 and p95 in ms."""
    return {
        "p50_ms": round(metrics.percentile(values, 50), 2),
        "p95_ms": round(metrics.percentile(values, 95), 2),
    }


def rss_mb(pid: int) -> dict[str, float]:
    """Resident memory of a live process (total and anonymous) from /proc."""
    out: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "VmHWM"):
                out[key] = round(int(value.split()[0]) / 1024, 1)
    except OSError:
        pass
    return out


class Peer:
    """vstash through its driver, as subprocesses."""

    def __init__(self, driver: Path, python: Path, workdir: Path) -> None:
        self.driver = driver
        self.python = python
        self.db = workdir / "vstash.db"
        self.workdir = workdir
        self.peak_rss_mb = 0.0  # the largest of its search processes
        self.last_rss_mb = 0.0

    def _run(self, *args: str) -> str:
        env = {**os.environ, "PEER_VSTASH_DIR": str(self.python.parent.parent)}
        out, err = self.workdir / "peer.out", self.workdir / "peer.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            proc = subprocess.Popen(
                [str(self.python), str(self.driver), *args],
                stdout=stdout,
                stderr=stderr,
                cwd=self.workdir,
                env=env,
            )
            # Its peak RSS, sampled from /proc while it runs: a child's ru_maxrss would count
            # this (large) process's pages at the fork.
            peak = 0.0
            while proc.poll() is None:
                peak = max(peak, rss_mb(proc.pid).get("VmHWM", 0.0))
                time.sleep(0.05)
        self.last_rss_mb = peak
        if proc.returncode != 0:
            raise RuntimeError(f"vstash driver {args[0]} failed: {err.read_text()[-2000:]}")
        return out.read_text()

    def ingest(self, folder: Path) -> dict[str, Any]:
        """Build the peer's DB from the folder (what `vstash add DIR` runs)."""
        out = self._run("ingest", "--db", str(self.db), "--dir", str(folder))
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return result

    def search(self, queries: dict[str, str]) -> list[dict[str, Any]]:
        """One process for a block of queries; its own warm-up query is untimed."""
        path = self.workdir / "block.jsonl"
        path.write_text(
            "".join(json.dumps({"id": q, "text": t}) + "\n" for q, t in queries.items())
        )
        out = self._run("search", "--db", str(self.db), "--queries", str(path), "--k", str(K))
        self.peak_rss_mb = max(self.peak_rss_mb, self.last_rss_mb)
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def cli(self, query: str) -> float:
        """Seconds for one whole `vstash search QUERY` process."""
        env = {
            **os.environ,
            "FASTEMBED_CACHE_PATH": str(self.python.parent.parent / "fastembed_cache"),
            "TIKTOKEN_CACHE_DIR": str(self.python.parent.parent / "tiktoken_cache"),
            "HF_HUB_OFFLINE": "1",
            "VSTASH_CONFIG": str(self.python.parent.parent / "vstash.toml"),
            "VSTASH_DB_PATH": str(self.db),
        }
        started = time.perf_counter()
        proc = subprocess.run(
            [str(self.python.parent / "vstash-offline"), "search", query],
            capture_output=True,
            env=env,
            cwd=self.workdir,
            check=False,
        )
        elapsed = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(f"vstash search failed: {proc.stderr.decode()[-2000:]}")
        return elapsed


class Daemon:
    """`recalld serve` on the benchmark's store, as a subprocess."""

    def __init__(self, workdir: Path, overrides: dict[str, str]) -> None:
        self.socket = workdir / "run" / "bench.sock"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("RECALLD_", "XDG_"))}
        self.env.update({"RECALLD_HOME": str(workdir), "RECALLD_DAEMON__SOCKET": str(self.socket)})
        self.sets = [a for k, v in overrides.items() for a in ("--set", f"{k}={v}")]
        self.log = workdir / "daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Client:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "recalld", "serve", *self.sets],
                env=self.env,
                stdout=log,
                stderr=log,
            )
        client = Client(self.socket, timeout=120)
        deadline = time.monotonic() + 300
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the daemon exited: {self.log.read_text()[-2000:]}")
            try:
                client.status()
                return client
            except DaemonError:
                client.close()
            if time.monotonic() > deadline:
                raise RuntimeError("the daemon did not answer within 300 s")
            time.sleep(0.1)

    def cli(self, query: str) -> float:
        """Seconds for one whole `recalld search QUERY --json` process."""
        started = time.perf_counter()
        proc = subprocess.run(
            [str(Path(sys.executable).with_name("recalld")), "search", query, "--json"],
            capture_output=True,
            env=self.env,
            check=False,
        )
        elapsed = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(f"recalld search failed: {proc.stderr.decode()[-2000:]}")
        return elapsed

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def ndcg(ranked: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> float:
    """Mean NDCG@10 of document rankings."""
    return round(
        metrics.mean([metrics.ndcg_at(ranked.get(q, []), j, K) for q, j in qrels.items()]), 4
    )


def _doc_ids(hits: list[Any]) -> list[str]:
    return list(dict.fromkeys(Path(h).stem for h in hits))


async def run(
    data: Path,
    split: str,
    limit: int | None,
    docs: int | None,
    blocks: int,
    cli_runs: int,
    peer: Peer | None,
    workdir: Path,
    overrides: dict[str, str],
) -> dict[str, Any]:
    """Ingest the folder into both systems (unless already there) and time every query."""
    corpus, queries, qrels = select(data, split, limit, docs)
    folder = workdir / "corpus"
    write_folder(corpus, folder)
    settings = bench_settings(workdir, overrides)
    embedder = load_model(settings)
    report: dict[str, Any] = {
        "dataset": str(data),
        "split": split,
        "documents": len(corpus),
        "queries": len(queries),
        "k": K,
        "blocks": blocks,
        "model": embedder.model_id,
        "overrides": overrides,
    }
    ingest: dict[str, Any] = {}
    memory = await AsyncMemory.open(settings, embedder=embedder)
    daemon: Daemon | None = None
    try:
        if (await memory.counts())["documents"] < len(corpus):
            started = time.perf_counter()
            paths = sorted(folder.iterdir())
            for start in range(0, len(paths), 256):
                await memory.ingestor.ingest_many(
                    [
                        (str(p), p.name, p.read_bytes(), None, None)
                        for p in paths[start : start + 256]
                    ]
                )
            ingest["recalld_s"] = round(time.perf_counter() - started, 1)
        if peer is not None and not peer.db.exists():
            found = await asyncio.to_thread(peer.ingest, folder)
            ingest["vstash_s"] = found["ingest_s"]
            ingest["vstash_chunks"] = found["chunks"]
        report["chunks"] = (await memory.counts())["chunks"]
        report["ingest"] = ingest
        daemon = Daemon(workdir, overrides)
        client = await asyncio.to_thread(daemon.start)
        await memory.search("warm up", limit=K)
        await asyncio.to_thread(client.search, "warm up", limit=K)
        await _keyword_mirror(memory)
        report.update(await _search_blocks(memory, client, peer, queries, qrels, blocks))
        report["socket_transport_ms"] = await asyncio.to_thread(
            _transport, client, list(queries.values())[:50]
        )
        report["cli"] = await asyncio.to_thread(
            _cli, daemon, peer, list(queries.values()), cli_runs
        )
        assert daemon.proc is not None
        report["rss_mb"] = {
            "daemon": rss_mb(daemon.proc.pid),
            "in_process": rss_mb(os.getpid()),
            "vstash_search_peak": peer.peak_rss_mb if peer else None,
        }
        client.close()
    finally:
        if daemon is not None:
            daemon.stop()
        await memory.close()
    return report


async def _keyword_mirror(memory: AsyncMemory) -> None:
    """Wait for the SQLite store's keyword mirror (its first search started the build), as a
    daemon that has been running a while has it; the daemon builds its own meanwhile."""
    store = memory.store
    if isinstance(store, SqliteStore):
        await store.keywords.load()


async def _search_blocks(
    memory: AsyncMemory,
    client: Client,
    peer: Peer | None,
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    blocks: int,
) -> dict[str, Any]:
    ids = list(queries)
    size = max(1, -(-len(ids) // max(1, blocks)))
    lat: dict[str, dict[str, float]] = {"in_process": {}, "socket": {}, "vstash": {}}
    ranked: dict[str, dict[str, list[str]]] = {"recalld": {}, "vstash": {}}
    stages: dict[str, list[float]] = {s: [] for s in STAGES}
    for number, start in enumerate(range(0, len(ids), size)):
        block = {q: queries[q] for q in ids[start : start + size]}
        turns = ["recalld", "vstash"] if number % 2 == 0 else ["vstash", "recalld"]
        for turn in turns:
            if turn == "vstash" and peer is not None:
                for row in await asyncio.to_thread(peer.search, block):
                    lat["vstash"][str(row["id"])] = float(row["latency_ms"])
                    ranked["vstash"][str(row["id"])] = [str(d) for d in row["doc_ids"]]
            elif turn == "recalld":
                forget_query_vectors(memory)
                for qid, text in block.items():
                    started = time.perf_counter()
                    result = await memory.search(text, limit=K)
                    lat["in_process"][qid] = (time.perf_counter() - started) * 1000
                    ranked["recalld"][qid] = _doc_ids([h.chunk.source for h in result.hits])
                    timings = result.explain.get("timings_ms", {})
                    for stage in STAGES:
                        if stage in timings:
                            stages[stage].append(timings[stage])
                for qid, text in block.items():
                    started = time.perf_counter()
                    await asyncio.to_thread(client.search, text, limit=K)
                    lat["socket"][qid] = (time.perf_counter() - started) * 1000
        print(f"\rsearched {start + len(block)}/{len(ids)}", end="", file=sys.stderr)
    print(file=sys.stderr)
    out: dict[str, Any] = {
        "search": {name: summary(list(v.values())) for name, v in lat.items() if v},
        "stages_ms_p50": {s: round(statistics.median(v), 2) for s, v in stages.items() if v},
        "ndcg@10": {name: ndcg(r, qrels) for name, r in ranked.items() if r},
    }
    socket_extra = [lat["socket"][q] - lat["in_process"][q] for q in lat["socket"]]
    out["socket_overhead_ms_p50"] = round(statistics.median(socket_extra), 2)
    if lat["vstash"]:
        ratios: dict[str, Any] = {}
        for name in ("in_process", "socket"):
            mine, theirs = lat[name], lat["vstash"]
            both = [q for q in mine if q in theirs]
            ratios[name] = {
                "p50_ratio": round(
                    statistics.median(mine[q] for q in both)
                    / statistics.median(theirs[q] for q in both),
                    3,
                ),
                "per_query_median": round(statistics.median(mine[q] / theirs[q] for q in both), 3),
            }
        out["ratio_to_vstash"] = ratios
    return out


def _transport(client: Client, queries: list[str]) -> dict[str, float]:
    """What the socket adds to a search: wall time at the client minus the daemon's own
    `total_ms` (asked with `explain`, on a fresh query text so no cache answers)."""
    extra = []
    for text in queries:
        started = time.perf_counter()
        result = client.search(text + " ", limit=K, explain=True)
        wall = (time.perf_counter() - started) * 1000
        extra.append(wall - result["explain"]["timings_ms"]["total_ms"])
    return summary(extra)


def _cli(daemon: Daemon, peer: Peer | None, queries: list[str], runs: int) -> dict[str, Any]:
    """Whole-process searches, the two systems alternating (vstash's take ~0.7 s each, so it
    gets a fifth of the runs)."""
    mine: list[float] = []
    theirs: list[float] = []
    for i in range(runs):
        query = queries[i % len(queries)]
        mine.append(daemon.cli(query) * 1000)
        if peer is not None and i % 5 == 0:
            theirs.append(peer.cli(query) * 1000)
    out: dict[str, Any] = {"recalld": {**summary(mine), "runs": len(mine)}}
    if theirs:
        out["vstash"] = {**summary(theirs), "runs": len(theirs)}
        out["p50_ratio"] = round(statistics.median(mine) / statistics.median(theirs), 3)
    return out

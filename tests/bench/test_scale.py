"""The scale and ingest benchmark commands run end to end on tiny sizes and report their fields."""

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bench import ingest, scale, scale_truth
from bench.__main__ import main
from recalld.storage.sqlite import readers
from recalld.storage.sqlite.store import SqliteStore
from recalld.types import NO_FILTERS, Filters
from tests.helpers.postgres import VECTOR_INDEX

ROUTES = ("vector", "vector_filtered", "exact", "search_full", "search_bm25")


def test_scale_command_reports_every_field(tmp_path: Path):
    result = CliRunner().invoke(
        main,
        [
            "scale",
            "--chunks",
            "2000",
            "--queries",
            "8",
            "--embed-queries",
            "0",
            "--exact-below",
            "1000",
            "--store-dir",
            str(tmp_path / "stores"),
            "--results",
            str(tmp_path / "out"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["tuning"]["exact_below"] == 1000
    assert report["query_embedding"] is None
    [size] = report["sizes"]
    assert size["chunks"] == 2000 and size["route"] == "cascade"
    assert size["recall@10"] >= 0.95 and size["recall@10_filtered"] >= 0.95
    # The one-pass ground truth is sqlite-vec's exact KNN, query by query.
    assert size["exact_timed_queries"] == 8 and size["exact_agreement"] == 1.0
    assert set(size["peak_rss_anon_mb"]) == {"index_load", "index_fill", "keyword_load"}
    for route in ROUTES:
        assert set(size[route]) == {"p50_ms", "p95_ms", "p99_ms"}
        assert 0 < size[route]["p50_ms"] <= size[route]["p99_ms"]
    for key in ("build_s", "disk_mb", "index_mb", "rss_mb", "peak_rss_mb", "index_load_s"):
        assert size[key] is not None and size[key] >= 0
    assert list((tmp_path / "out").glob("scale-*.json"))


def test_scale_command_measures_postgresql_beside_sqlite(tmp_path: Path, pg_url: str):
    # The bulk load into a fresh database (indexes built at its end), then every route.
    result = CliRunner().invoke(
        main,
        [
            "scale",
            "--chunks",
            "2000",
            "--queries",
            "5",
            "--embed-queries",
            "0",
            "--store",
            pg_url,
            "--results",
            str(tmp_path / "out"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    sqlite, pg = json.loads(result.stdout)["sizes"]
    assert (sqlite["backend"], pg["backend"]) == ("sqlite", "postgresql")
    assert pg["route"] == f"postgresql/{VECTOR_INDEX}"  # "auto": what this CPU runs
    assert pg["recall@10"] >= 0.9 and pg["build_chunks_per_s"] > 0
    assert pg["shared_buffers"].endswith("B")
    for route in ROUTES:
        assert 0 < pg[route]["p50_ms"] <= pg[route]["p99_ms"]


def test_synthetic_vectors_look_like_minilm():
    corpus = scale.make_corpus(4000, 384)
    texts, vectors, _ = next(scale.batches(corpus, 2000))
    assert len(texts) == 2000 and vectors.shape == (2000, 384)
    assert 40 <= len(texts[0].split()) <= 120
    assert abs(float(np.linalg.norm(vectors[0])) - 1.0) < 1e-5
    # The calibration targets: random pairs ~0.12, a query's 10th neighbour ~0.5.
    assert 0.05 < float((vectors[:500] @ vectors[500:1000].T).mean()) < 0.2
    _, q = scale.queries(corpus, 20)
    tenth = np.sort(q @ vectors.T, axis=1)[:, -10]
    assert 0.3 < float(tenth.mean()) < 0.6


def test_ingest_slices_are_consecutive_and_their_pairs_take_turns():
    paths = [Path(f"f{i}") for i in range(10)]
    parts = ingest.split(paths, 3)
    assert [len(p) for p in parts] == [4, 3, 3] and [p for part in parts for p in part] == paths
    assert ingest.split(paths[:2], 5) == [[paths[0]], [paths[1]]]  # never an empty slice
    # ABBA: pairs alternate, and the next round starts the other way round.
    assert [ingest._model_first(i, 0) for i in range(4)] == [False, True, False, True]
    assert [ingest._model_first(i, 1) for i in range(2)] == [True, False]


def test_ingest_command_compares_the_pipeline_with_the_model(tmp_path: Path):
    folder = tmp_path / "files"
    folder.mkdir()
    for i in range(5):
        (folder / f"note{i}.md").write_text(f"# Note {i}\n\n" + "words about sqlite wal " * 60)
    (folder / ".hidden.md").write_text("skipped")
    result = CliRunner().invoke(
        main,
        [
            "ingest",
            str(folder),
            "--set",
            "embed.model=hash:64",
            "--store-dir",
            str(tmp_path / "store"),
            "--results",
            str(tmp_path / "out"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["files"] == 5 and report["chunks"] >= 5
    assert report["model_only"]["texts"] == report["chunks"]
    assert report["pipeline"]["chunks_per_s"] > 0 and report["overhead_ratio"] > 0


def test_plot_command_writes_pngs(tmp_path: Path):
    pytest.importorskip("matplotlib")
    size = {
        "chunks": 10000,
        "recall@10": 1.0,
        "index_mb": 0.7,
        **{r: {"p50_ms": 2.0, "p95_ms": 3.0, "p99_ms": 4.0} for r in ROUTES},
    }
    scale_report = {"benchmark": "scale", "dimension": 384, "sizes": [size, size]}
    beir_report = {
        "benchmark": "beir",
        "dataset": "scifact",
        "split": "train",
        "model": "m",
        "modes": {
            m: {"ndcg@10": 0.6, "recall@10": 0.7, "recall@100": 0.9, "mrr@10": 0.5}
            for m in ("bm25", "vector")
        },
    }
    paths = []
    for name, report in (("scale", scale_report), ("beir", beir_report)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(report))
        paths.append(str(path))
    result = CliRunner().invoke(main, ["plot", *paths])
    assert result.exit_code == 0, result.output
    for name in ("scale", "beir"):
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


async def test_one_pass_truth_is_sqlite_vec_exact_knn(tmp_path: Path):
    corpus = scale.make_corpus(1500, 384)
    path = tmp_path / "truth.db"
    await scale.build(path, corpus, 1500)
    _, queries = scale.queries(corpus, 6)
    store = await SqliteStore.open(path, model_id="synthetic-384", dimension=384)
    try:
        async with store.reading_conn() as conn:
            every, rounds = await scale_truth.exact_top(conn, queries, 10, 384, ("round",))
            for q, want, want_rounds in zip(queries, every, rounds, strict=True):
                hits = await readers.knn(conn, None, q, 10, NO_FILTERS)
                assert [cid for cid, _ in hits] == want
                only = Filters(granularities=("round",))
                hits = await readers.knn(conn, None, q, 10, only)
                assert [cid for cid, _ in hits] == want_rounds
    finally:
        await store.close()

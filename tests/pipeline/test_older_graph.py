"""A store embedded with an older graph version of the local model: it opens as it was (the
same vectors, no refusal), and `reindex --model local` moves it to the current graph; on
SQLite and on PostgreSQL."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.embeddings import catalog
from recalld.embeddings.local import GRAPH_VERSION, LocalEmbedder
from recalld.errors import EmbeddingError

NOTE = "The heron waits in the shallows for the first light over the marsh."


async def _ignore(info: dict) -> None:
    pass


def graphs(model_cache: Path, cache_dir: Path) -> tuple[LocalEmbedder, LocalEmbedder]:
    """The current and the version-2 embedder in `cache_dir`. Both run the same graph file
    (only the session's fusions differ): copies of the suite's build spare two builds."""
    built = LocalEmbedder(cache_dir=model_cache)
    built.load()
    current = LocalEmbedder(cache_dir=cache_dir)
    older = current.at_graph(2)
    cache_dir.mkdir(parents=True, exist_ok=True)
    for embedder in (current, older):
        shutil.copyfile(built.graph_path, embedder.graph_path)
    return current, older


async def test_an_older_graph_store_opens_as_it_was_then_reindexes(
    tmp_path: Path, store_env: dict[str, str], caplog: pytest.LogCaptureFixture, model_cache: Path
) -> None:
    settings = load_settings(None, {"RECALLD_HOME": str(tmp_path), **store_env}, {}).settings
    current, older = graphs(model_cache, settings.model_cache_dir)
    assert older.model_id == "minilm-l6-v2/onnx-int8pc-v2" != current.model_id

    memory = await AsyncMemory.open(settings, embedder=older)
    try:
        await memory.remember(NOTE)
    finally:
        await memory.close()

    # The config names `local` (the default): the store's graph is used, not refused.
    with caplog.at_level(logging.WARNING, logger="recalld.api"):
        memory = await AsyncMemory.open(settings)
    try:
        assert memory.embedder.model_id == memory.store.model_id == older.model_id
        assert "reindex --model local" in caplog.text
        found = await memory.search(NOTE, mode="vector", limit=1)
        assert found.hits[0].chunk.text == NOTE
        same = float(older.embed([NOTE])[0] @ older.embed([NOTE])[0])
        assert found.explain["best_similarity"] == pytest.approx(same, abs=1e-4)
        await memory.reindexer.start("local")
        await memory.reindexer.wait(_ignore)
        assert memory.embedder.model_id == memory.store.model_id == current.model_id
    finally:
        await memory.close()

    memory = await AsyncMemory.open(settings)
    try:
        assert memory.embedder.model_id == current.model_id
        assert current.model_id == f"minilm-l6-v2/onnx-int8pc-v{GRAPH_VERSION}"
        found = await memory.search(NOTE, mode="vector", limit=1)
        assert found.hits[0].chunk.text == NOTE
    finally:
        await memory.close()


def test_an_unknown_graph_version_is_refused() -> None:
    with pytest.raises(EmbeddingError, match="graph version 1 is not one recalld computes"):
        LocalEmbedder(graph_version=1)


def test_older_graph_names_only_versions_still_computed() -> None:
    current = f"minilm-l6-v2/onnx-int8pc-v{catalog.LOCAL_GRAPH_VERSION}"
    assert catalog.older_graph(current, "minilm-l6-v2/onnx-int8pc-v2") == 2
    assert catalog.older_graph("my-tuned/onnx-int8pc-v3", "my-tuned/onnx-int8pc-v2") == 2
    assert catalog.older_graph(current, "minilm-l6-v2/onnx-int8pc-v1") is None  # refused
    assert catalog.older_graph(current, "minilm-l6-v2/onnx-fp32-v2") is None  # other variant
    assert catalog.older_graph(current, "hash-64") is None
    assert catalog.older_graph("hash-64", "hash-32") is None


def test_the_catalog_mirrors_the_versions_the_embedder_computes() -> None:
    from recalld.embeddings import local

    assert catalog.LOCAL_GRAPH_VERSION == local.GRAPH_VERSION
    assert set(catalog.LOCAL_OLDER_GRAPHS) == set(local.FUSIONS_OFF) - {local.GRAPH_VERSION}


def test_graph_two_differs_by_float_rounding(tmp_path: Path, model_cache: Path) -> None:
    # Version 2's session fuses each residual Add into its LayerNorm, as it always did
    # (tests/unit/test_local_embedder.py: test_residual_adds_stay_unfused).
    current, older = graphs(model_cache, tmp_path)
    texts = [NOTE, "Quarterly revenue rose on strong cloud demand.", "a b c d e f g"]
    a, b = current.embed(texts), older.embed(texts)
    assert np.min(np.sum(a * b, axis=1)) > 0.99  # float rounding apart

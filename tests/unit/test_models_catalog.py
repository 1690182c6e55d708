"""`recalld models`: the catalog lists models without loading them, and marks the store's."""

from __future__ import annotations

from pathlib import Path

from recalld.config import EmbedSettings
from recalld.embeddings import catalog, local


def test_local_ids_follow_the_embedder(tmp_path: Path) -> None:
    # The catalog avoids importing onnxruntime; this keeps its copies of the ids honest.
    assert catalog.LOCAL_DIMENSION == local.DIMENSION
    for quantize in (True, False):
        built = local.LocalEmbedder(quantize=quantize, cache_dir=tmp_path)  # nothing loaded yet
        assert catalog.local_model_id(quantize) == built.model_id


def test_endpoint_and_extra_specs_are_listed_and_marked() -> None:
    settings = EmbedSettings(model="openai:nomic", base_url="http://127.0.0.1:9/v1")
    models = catalog.available(settings, ("hash:32", "hash:32"))
    specs = [m.spec for m in models]
    assert specs == ["local", "local:fp32", "hash:64", "openai:nomic", "hash:32"]
    rows = catalog.annotate(
        models,
        "openai:nomic@127.0.0.1:9/768",
        768,
        "openai:nomic",
        {"spec": "hash:32", "model": "hash-32", "dimension": 32},
        "openai:nomic",
    )
    by_spec = {r["spec"]: r for r in rows}
    assert by_spec["openai:nomic"]["in_use"] and by_spec["openai:nomic"]["dimension"] == 768
    assert by_spec["openai:nomic"]["configured"]
    assert by_spec["hash:32"]["reindex_target"] and not by_spec["hash:32"]["in_use"]
    assert not any(r["in_use"] for s, r in by_spec.items() if s != "openai:nomic")


def test_a_base_url_without_an_openai_model_is_offered() -> None:
    models = catalog.available(EmbedSettings(model="local", base_url="http://h/v1"))
    [endpoint] = [m for m in models if m.kind == "endpoint"]
    assert endpoint.spec == "openai:MODEL" and "http://h/v1" in endpoint.description

"""The models a user can choose from (`recalld models`), listed without loading any of them.

Local models are described from constants (importing onnxruntime takes a second, and a model
list should not); an OpenAI-compatible endpoint is listed when the settings configure one, with
its dimension when `embed.dimensions` fixes it (otherwise the endpoint says on first use).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from recalld.config import EmbedSettings
from recalld.masking import mask

# Mirrors embeddings/local.py (GRAPH_VERSION, DIMENSION, the variant names); a test keeps
# them in step.
LOCAL_GRAPH_VERSION = 3
# Older graph versions whose vectors recalld still computes (local.py's FUSIONS_OFF).
LOCAL_OLDER_GRAPHS = (2,)
LOCAL_DIMENSION = 384
HASH_EXAMPLE = 64


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """One choosable model.

    Attributes:
        spec: What `embed.model` / `reindex --model` take.
        model_id: The id stored with the vectors (None: known once the endpoint answers).
        dimension: Vector length (None: known once the endpoint answers).
        kind: `local`, `tuned`, `endpoint` or `test`.
        description: One line for people.
    """

    spec: str
    model_id: str | None
    dimension: int | None
    kind: str
    description: str

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        return asdict(self)


def local_model_id(quantize: bool) -> str:
    """The model id `LocalEmbedder` stamps, int8 (per-channel) or fp32."""
    variant = "int8pc" if quantize else "fp32"
    return f"minilm-l6-v2/onnx-{variant}-v{LOCAL_GRAPH_VERSION}"


def older_graph(model_id: str, stored_id: str) -> int | None:
    """The graph version `stored_id` names when it is the local (or tuned) model `model_id` at
    an older graph version recalld still computes; else None."""
    base, sep, _ = model_id.rpartition("-v")
    stored_base, stored_sep, version = stored_id.rpartition("-v")
    if not sep or not stored_sep or stored_base != base or not version.isdigit():
        return None
    return int(version) if int(version) in LOCAL_OLDER_GRAPHS else None


def available(
    settings: EmbedSettings,
    extra: tuple[str, ...] = (),
    tuned: Sequence[Mapping[str, Any]] = (),
) -> list[ModelInfo]:
    """The packaged models, the test embedder, the models `recalld tune` made, and the
    configured endpoint (if any).

    Args:
        settings: The `embed` settings (the endpoint, its dimensions).
        extra: More specs to describe (the store's, a reindex target), e.g. `hash:32`.
        tuned: The manifests of the tuned models (`embeddings.tuned.list_tuned`).
    """
    found = [
        ModelInfo(
            "local",
            local_model_id(True),
            LOCAL_DIMENSION,
            "local",
            "all-MiniLM-L6-v2, packaged, int8 ONNX (the default; offline)",
        ),
        ModelInfo(
            "local:fp32",
            local_model_id(False),
            LOCAL_DIMENSION,
            "local",
            "all-MiniLM-L6-v2, packaged, fp32 ONNX (slower, slightly closer to the original)",
        ),
        _hash(f"hash:{HASH_EXAMPLE}"),
    ]
    for manifest in tuned:
        gate = manifest.get("gate") or {}
        found.append(
            ModelInfo(
                str(manifest["spec"]),
                f"{manifest['model_name']}/onnx-int8pc-v{LOCAL_GRAPH_VERSION}",
                LOCAL_DIMENSION,
                "tuned",
                f"tuned from {manifest.get('base')} on this store's own pseudo-queries "
                f"(held-out MRR@10 {gate.get('mrr_before')} -> {gate.get('mrr_after')})",
            )
        )
    specs = [settings.model, *extra]
    if settings.base_url and not settings.model.startswith("openai:"):
        specs.append("openai:")  # an endpoint is configured but no model named yet
    for spec in specs:
        if any(m.spec == spec for m in found):
            continue
        scheme = spec.partition(":")[0]
        if scheme == "hash":
            found.append(_hash(spec))
        elif scheme == "openai":
            found.append(_endpoint(spec, settings))
    return found


def _hash(spec: str) -> ModelInfo:
    dim = spec.partition(":")[2]
    dimension = int(dim) if dim.isdigit() else HASH_EXAMPLE
    return ModelInfo(
        spec,
        f"hash-{dimension}",
        dimension,
        "test",
        "hashed bag of words, for tests (hash:N for N dims); knows no meaning",
    )


def _endpoint(spec: str, settings: EmbedSettings) -> ModelInfo:
    model = spec.partition(":")[2]
    where = mask(settings.base_url) or "https://api.openai.com/v1"  # never its password
    return ModelInfo(
        spec if model else "openai:MODEL",
        None,
        settings.dimensions or None,
        "endpoint",
        f"OpenAI-compatible endpoint at {where}"
        + ("" if model else " (name a model: openai:<model>)"),
    )


def annotate(
    models: list[ModelInfo],
    store_model: str | None,
    store_dimension: int | None,
    store_spec: str | None,
    target: dict[str, Any] | None,
    configured: str | None = None,
) -> list[dict[str, Any]]:
    """Mark which model the store uses and which one a reindex is building.

    Endpoint ids are only known once the endpoint answered; for those the recorded spec of the
    store (or of the reindex) decides.
    """
    out = []
    for m in models:
        row = m.as_dict()
        row["configured"] = m.spec == configured
        row["in_use"] = (m.model_id is not None and m.model_id == store_model) or (
            m.model_id is None and m.spec == store_spec
        )
        if row["in_use"] and row["dimension"] is None:
            row["dimension"] = store_dimension
        row["reindex_target"] = target is not None and (
            m.model_id == target.get("model") or m.spec == target.get("spec")
        )
        if target is not None and row["reindex_target"] and row["dimension"] is None:
            row["dimension"] = target.get("dimension")
        out.append(row)
    return out

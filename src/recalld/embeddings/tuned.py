"""Models made by `recalld tune`: where they live, what they record, how they are loaded.

A tuned model is a folder under the data directory (`Settings.tuned_model_dir`), named after its
spec (`local:tuned-20261126-1305` lives in `tuned-20261126-1305/`). It holds the tuned weights
(`model.safetensors`), the base model's `config.json` and `tokenizer.json`, the int8 ONNX graph
built from those weights exactly as the packaged model's is (`LocalEmbedder.graph_path`), and
`tuned.json`: the checksums of
weights and graph, the base model, the training settings and the eval gate's figures.

Nothing here imports torch: the daemon loads a tuned model the way it loads the packaged one.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recalld.errors import ConfigError, EmbeddingError

if TYPE_CHECKING:
    from recalld.embeddings.local import LocalEmbedder

SCHEME_PREFIX = "local:tuned-"
MANIFEST = "tuned.json"


def is_tuned(spec: str) -> bool:
    """Whether `spec` names a tuned model."""
    return spec.startswith(SCHEME_PREFIX)


def folder_of(spec: str, models_dir: Path) -> Path:
    """The folder of the tuned model `spec`."""
    name = spec.partition(":")[2]
    if not name or "/" in name or name.startswith("."):
        raise ConfigError(f"not a tuned model spec: {spec!r}")
    return models_dir / name


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file (blocking)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(folder: Path) -> dict[str, Any]:
    """A tuned model's `tuned.json`.

    Raises:
        EmbeddingError: It is missing or unreadable.
    """
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise EmbeddingError(f"cannot read the tuned model in {folder}: {exc}") from exc
    if not isinstance(data, dict) or "weights_sha256" not in data:
        raise EmbeddingError(f"{folder / MANIFEST} is not a tuned model manifest")
    return data


def list_tuned(models_dir: Path) -> list[dict[str, Any]]:
    """The manifests of every tuned model under `models_dir`, oldest first (unreadable ones are
    left out)."""
    if not models_dir.is_dir():
        return []
    found = []
    for folder in sorted(models_dir.glob("tuned-*")):
        try:
            found.append(read_manifest(folder))
        except EmbeddingError:
            continue
    return found


def tuned_embedder(spec: str, models_dir: Path, threads: int | None = None) -> LocalEmbedder:
    """The embedder of the tuned model `spec`, its graph checked against its manifest.

    Raises:
        ConfigError: No such tuned model.
        EmbeddingError: Its files are damaged (a checksum does not match).
    """
    from recalld.embeddings.local import LocalEmbedder

    folder = folder_of(spec, models_dir)
    if not folder.is_dir():
        raise ConfigError(f"no tuned model {spec!r} in {models_dir} (see `recalld models`)")
    manifest = read_manifest(folder)
    embedder = LocalEmbedder(
        quantize=True,
        cache_dir=folder,
        model_dir=folder,
        intra_op_num_threads=threads,
        model_name=manifest.get("model_name", folder.name),
        weights_sha256=str(manifest["weights_sha256"]),
        # Models tuned before the fused-attention graph keep the graph their checksum is of.
        fused_attention=bool(manifest.get("fused_attention", False)),
    )
    graph = embedder.graph_path
    if graph.exists() and sha256_of(graph) != manifest.get("graph_sha256"):
        raise EmbeddingError(f"{graph} does not match its checksum in {MANIFEST}: tune again")
    return embedder

"""Tuned weights into production form: safetensors, rebuilt into recalld's own ONNX graph with
the packaged model's int8 quantisation (`LocalEmbedder` does the building), with checksums."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from recalld import private
from recalld.embeddings import tuned
from recalld.embeddings.local import LocalEmbedder
from recalld.tune.encoder import Encoder


def build(
    encoder: Encoder, base_dir: Path, models_dir: Path, name: str, manifest: dict[str, Any]
) -> tuple[Path, LocalEmbedder]:
    """Write the model into a private temp folder under `models_dir` and build its graph
    (blocking). `publish` moves it into place; a refused one is just removed."""
    private.private_dir(models_dir)
    folder = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=models_dir))
    try:
        weights = folder / "model.safetensors"
        encoder.save_safetensors(weights)
        for part in ("config.json", "tokenizer.json"):
            shutil.copyfile(base_dir / part, folder / part)
        model_name = f"minilm-l6-v2+{name}"
        embedder = LocalEmbedder(
            quantize=True,
            cache_dir=folder,
            model_dir=folder,
            intra_op_num_threads=2,
            model_name=model_name,
            weights_sha256=tuned.sha256_of(weights),
        )
        embedder.load()
        record = {
            **manifest,
            "spec": f"local:{name}",
            "model_name": model_name,
            "model_id": embedder.model_id,
            "weights_sha256": embedder.weights_sha256,
            "graph_sha256": tuned.sha256_of(embedder.graph_path),
            "fused_attention": embedder.fused_attention,
        }
        (folder / tuned.MANIFEST).write_text(json.dumps(record, indent=2, sort_keys=True))
        for path in folder.iterdir():
            private.private_file(path, warn=False)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder, embedder


def publish(folder: Path, models_dir: Path, name: str) -> Path:
    """Move a built model to its final folder (one rename: it appears whole or not at all)."""
    target = models_dir / name
    folder.rename(target)
    return target

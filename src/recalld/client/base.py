"""What `Client` and `AsyncClient` share: request building and mapping error objects back to
exceptions (the client side of the daemon's one mapping in `recalld.daemon.methods`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

from recalld import protocol
from recalld.errors import (
    DaemonBusy,
    DaemonError,
    DaemonNotRunning,
    IngestError,
    ProtocolError,
    RecalldError,
    error_classes,
)

# typing is left out of `recalld search`'s start-up (issue 20): mypy reads this block only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, TypeAlias

DEFAULT_TIMEOUT = 120.0

# Every socket method and the client method that calls it, in `Client` and `AsyncClient` alike
# (tests/pipeline/test_client_parity.py holds this against the daemon's method table).
METHODS = {
    "search": "search",
    "get": "get",
    "remember": "remember",
    "forget": "forget",
    "ingest": "ingest",
    "sources/list": "sources_list",
    "sources/add": "sources_add",
    "sources/remove": "sources_remove",
    "status": "status",
    "calibrate": "calibrate",
    "errors/list": "errors",
    "admin/check": "check",
    "config/show": "config_show",
    "export": "export",
    "import": "import_file",
    "models/list": "models",
    "reindex": "reindex",
    "reindex/cancel": "reindex_cancel",
    "tune": "tune",
    "memories/update": "update",
    "memories/history": "history",
    "links/add": "link",
    "links/list": "links",
    "links/remove": "unlink",
    "context": "context",
    "jobs/list": "jobs",
    "jobs/get": "job",
    "jobs/wait": "wait_job",
    "jobs/cancel": "cancel_job",
    "list": "browse",
    "forget/path": "forget_path",
    "ignored/list": "ignored",
    "ignored/remove": "unforget",
}
# Client methods that are a second way to call a socket method.
ALIASES = {"forget_query": "forget", "forget_confirm": "forget", "start_ingest": "ingest"}

JOB_FINAL = ("done", "failed", "cancelled")
# Following a job is a series of `jobs/wait` calls, each well inside the client's own timeout,
# so no client timeout can end it; a daemon gone for longer than this ends it.
JOB_WAIT_MAX_S = 10.0
RECONNECT_S = 30.0
RECONNECT_PAUSE_S = 0.5

ProgressCallback: TypeAlias = "Callable[[dict[str, Any]], object]"

_PROTOCOL_CODES = frozenset(
    {
        protocol.PARSE_ERROR,
        protocol.INVALID_REQUEST,
        protocol.METHOD_NOT_FOUND,
        protocol.INVALID_PARAMS,
        protocol.LINE_TOO_LONG,
    }
)


def error_from_object(error: Mapping[str, Any]) -> RecalldError:
    """The exception for an error object: the class named by `data.type` when it is one of
    recalld's, else `ProtocolError` for protocol codes and `DaemonError` for the rest."""
    code = error.get("code")
    message = str(error.get("message") or "the daemon reported an error")
    data = dict(error.get("data") or {})
    cls = error_classes().get(str(data.pop("type", "")))
    if cls is None and code == protocol.TOO_MANY_CONNECTIONS:
        cls = DaemonBusy
    if cls is None:
        cls = ProtocolError if code in _PROTOCOL_CODES else DaemonError
        data["rpc_code"] = code
    return cls(message, data=data)


def not_running(
    path: str | os.PathLike[str], exc: OSError, also: Sequence[str | os.PathLike[str]] = ()
) -> DaemonNotRunning:
    """The error for a socket nobody answers on (and the other places looked at)."""
    looked = f"; also looked at {', '.join(map(str, also))}" if also else ""
    return DaemonNotRunning(
        f"recalld is not running (no daemon at {path}: {exc.strerror or exc}{looked}); "
        "start it with `recalld serve`, or set daemon.socket to where it listens",
        data={"socket": os.fspath(path), "looked_at": [os.fspath(p) for p in (path, *also)]},
    )


def dropped(line: bytes) -> RecalldError:
    """The error for a connection the daemon closed under a call: the error line it sent
    first if one arrived (a refusal: `DaemonBusy`), else a plain `DaemonError`. The daemon
    accepted the connection, so it is running: never `DaemonNotRunning`."""
    try:
        message = protocol.parse_incoming(line) if line.strip() else None
    except protocol.RpcError:
        message = None
    if message is not None and message.error is not None:
        return error_from_object(message.error)
    return DaemonError(
        "the daemon closed the connection before answering; it may be shutting down or "
        "busy, see `recalld status`"
    )


def wait_slice(timeout: float | None) -> float:
    """Seconds one `jobs/wait` may take with this client timeout."""
    if timeout is None:
        return JOB_WAIT_MAX_S
    return max(0.1, min(JOB_WAIT_MAX_S, timeout / 2))


def follow_again(exc: RecalldError) -> bool:
    """Whether following a job goes on after `exc`: a timeout, a dropped connection or a daemon
    not answering for a moment do not end it; the daemon's own errors do."""
    return type(exc) is DaemonError or isinstance(exc, (DaemonNotRunning, DaemonBusy))


def ingest_params(
    path: str | os.PathLike[str], exclude: Sequence[str], allow_secrets: bool
) -> dict[str, Any]:
    """Params of `ingest`, leaving out what is unset."""
    params: dict[str, Any] = {"path": absolute(path)}
    if exclude:
        params["exclude"] = list(exclude)
    if allow_secrets:
        params["allow_secrets"] = True
    return params


def ingest_result(job: Mapping[str, Any]) -> dict[str, Any]:
    """The report of a finished ingest job.

    Raises:
        IngestError: The job was cancelled.
        RecalldError: The job failed: its error, as the daemon's class.
    """
    if job["state"] == "done":
        return dict(job["result"])
    if job["state"] == "cancelled":
        raise IngestError(
            f"ingest job {job['id']} stopped: {job['error']['message']}", data={"job": job["id"]}
        )
    raise error_from_object(job["error"])


def socket_from_env(env: Mapping[str, str], config_file: Path | None = None) -> Path:
    """The socket path the daemon uses with this environment and config file."""
    from recalld.config import load_settings  # only here: a client that is given its socket
    # does not pay for every setting's dataclasses (issue 20)

    return load_settings(config_file, env).settings.socket_path


def absolute(path: str | os.PathLike[str]) -> str:
    """A path as the daemon needs it: absolute, since it has its own working directory."""
    from pathlib import Path  # only here: `recalld search` starts without it (issue 20)

    return os.fspath(Path(path).expanduser().resolve())


def search_params(
    query: str,
    limit: int | None,
    mode: str | None,
    filters: Mapping[str, Any] | None,
    explain: bool,
    expand: int | None,
    budget_tokens: int | None = None,
    time_aware: bool | None = None,
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Params of `search`, leaving out what is unset."""
    params: dict[str, Any] = {"query": query}
    if settings:
        params["settings"] = dict(settings)
    if limit is not None:
        params["limit"] = limit
    if mode is not None:
        params["mode"] = mode
    if filters:
        params["filters"] = {k: v for k, v in filters.items() if v not in (None, (), [])}
    if explain:
        params["explain"] = True
    if expand is not None:
        params["expand"] = expand
    if budget_tokens is not None:
        params["budget_tokens"] = budget_tokens
    if time_aware is not None:
        params["time_aware"] = time_aware
    return params


def remember_params(
    text: str,
    memory_type: str,
    tags: Sequence[str],
    importance: float,
    event_time: float | str | None,
    project: str | None = None,
) -> dict[str, Any]:
    """Params of `remember`."""
    params: dict[str, Any] = {
        "text": text,
        "type": memory_type,
        "tags": list(tags),
        "importance": importance,
    }
    if event_time is not None:
        params["event_time"] = event_time
    if project is not None:
        params["project"] = project
    return params


def context_params(
    event: str,
    project: str | None,
    prompt: str | None,
    budget_tokens: int | None,
    session_id: str | None,
    transcript_path: str | None,
) -> dict[str, Any]:
    """Params of `context`, leaving out what is unset."""
    params: dict[str, Any] = {"event": event}
    for name, value in (
        ("project", project),
        ("prompt", prompt),
        ("budget_tokens", budget_tokens),
        ("session_id", session_id),
        ("transcript_path", transcript_path),
    ):
        if value is not None:
            params[name] = value
    return params


def forget_params(source: str | None, chunk_id: int | None) -> dict[str, Any]:
    """Params of `forget`: a source (a path is made absolute when it exists) or a chunk id."""
    if chunk_id is not None:
        return {"id": chunk_id}
    if source is None:
        raise TypeError("forget() needs a source or a chunk_id")
    if os.path.exists(source):
        source = absolute(source)
    return {"source": source}


def export_sink(
    write: Callable[[str], object], on_progress: ProgressCallback | None
) -> ProgressCallback:
    """The progress callback of `export`: lines go to `write`, the rest to `on_progress`."""

    def sink(params: dict[str, Any]) -> None:
        lines = params.get("lines")
        if isinstance(lines, str):
            write(lines)
        if on_progress is not None:
            on_progress({k: v for k, v in params.items() if k != "lines"})

    return sink


def update_params(
    chunk_id: int,
    text: str | None,
    memory_type: str | None,
    tags: Sequence[str] | None,
    importance: float | None,
    event_time: float | str | None,
) -> dict[str, Any]:
    """Params of `memories/update`, leaving out what is unchanged."""
    params: dict[str, Any] = {"id": chunk_id}
    for name, value in (
        ("text", text),
        ("type", memory_type),
        ("importance", importance),
        ("event_time", event_time),
    ):
        if value is not None:
            params[name] = value
    if tags is not None:
        params["tags"] = list(tags)
    return params


def link_params(src: int, dst: int, relation: str | None, weight: float | None) -> dict[str, Any]:
    """Params of `links/add` and `links/remove`."""
    params: dict[str, Any] = {"src": src, "dst": dst}
    if relation is not None:
        params["relation"] = relation
    if weight is not None:
        params["weight"] = weight
    return params


def list_params(
    what: str,
    sources: Sequence[str],
    kinds: Sequence[str],
    tags: Sequence[str],
    since: float | str | None,
    until: float | str | None,
    limit: int,
    offset: int,
) -> dict[str, Any]:
    """Params of `list`; source prefixes that exist on disk are made absolute."""
    params: dict[str, Any] = {"what": what, "limit": limit, "offset": offset}
    if sources:
        params["sources"] = [absolute(s) if os.path.exists(s) else s for s in sources]
    for name, values in (("kinds", kinds), ("tags", tags)):
        if values:
            params[name] = list(values)
    for name, value in (("since", since), ("until", until)):
        if value is not None:
            params[name] = value
    return params


def forget_query_params(
    query: str, limit: int | None, filters: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Params of `forget` by query (the preview step)."""
    params: dict[str, Any] = {"query": query}
    if limit is not None:
        params["limit"] = limit
    if filters:
        params["filters"] = {k: v for k, v in filters.items() if v not in (None, (), [])}
    return params


def links_params(chunk_id: int, relation: str | None, direction: str) -> dict[str, Any]:
    """Params of `links/list`."""
    params: dict[str, Any] = {"id": chunk_id, "direction": direction}
    if relation is not None:
        params["relation"] = relation
    return params


def sources_add_params(
    path: str | os.PathLike[str], kind: str, exclude: Sequence[str]
) -> dict[str, Any]:
    """Params of `sources/add`, leaving out an empty `exclude`."""
    params: dict[str, Any] = {"path": absolute(path), "kind": kind}
    if exclude:
        params["exclude"] = list(exclude)
    return params


def import_params(
    path: str | os.PathLike[str], replace: bool, allow_secrets: bool
) -> dict[str, Any]:
    """Params of `import`, sending `allow_secrets` only when it is set."""
    params: dict[str, Any] = {"path": absolute(path), "replace": replace}
    if allow_secrets:
        params["allow_secrets"] = True
    return params


def reindex_params(model: str | None, detach: bool) -> dict[str, Any]:
    """Params of `reindex`; no `model` follows the reindex running."""
    params: dict[str, Any] = {"detach": detach}
    if model is not None:
        params["model"] = model
    return params


def tune_params(
    dry_run: bool, switch: bool, max_steps: int | None, max_seconds: float | None
) -> dict[str, Any]:
    """Params of `tune`, leaving out unset budgets."""
    params: dict[str, Any] = {"dry_run": dry_run, "switch": switch}
    if max_steps is not None:
        params["max_steps"] = max_steps
    if max_seconds is not None:
        params["max_seconds"] = max_seconds
    return params

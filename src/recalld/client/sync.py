"""`Client`: the blocking client, one Unix socket connection reused across calls."""

from __future__ import annotations

import _socket  # the socket type itself: `socket` wraps it in IntEnums that cost ~3 ms (issue 20)
import io
import itertools
import os
import select
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType

from recalld import protocol
from recalld.client.base import (
    DEFAULT_TIMEOUT,
    JOB_FINAL,
    RECONNECT_PAUSE_S,
    RECONNECT_S,
    ProgressCallback,
    absolute,
    context_params,
    dropped,
    error_from_object,
    export_sink,
    follow_again,
    forget_params,
    forget_query_params,
    import_params,
    ingest_params,
    ingest_result,
    link_params,
    links_params,
    list_params,
    not_running,
    reindex_params,
    remember_params,
    search_params,
    socket_from_env,
    sources_add_params,
    tune_params,
    update_params,
    wait_slice,
)
from recalld.errors import DaemonBusy, DaemonError, DaemonNotRunning, RecalldError
from recalld.places import posix_path

# typing is left out of `recalld search`'s start-up (issue 20): mypy reads this block only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import IO, Any

    from _typeshed import WriteableBuffer


class _SocketReader(io.RawIOBase):
    """What `socket.makefile("rb")` reads through (its `SocketIO`), on the bare socket type:
    a timed-out read spoils the stream, so the next one fails rather than read a half line."""

    def __init__(self, sock: _socket.socket) -> None:
        super().__init__()
        self._sock = sock
        self._timed_out = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        if self._timed_out:
            raise OSError("cannot read from timed out object")
        try:
            return self._sock.recv_into(buffer)
        except TimeoutError:
            self._timed_out = True
            raise


def _closed_by_peer(sock: _socket.socket) -> bool:
    """True when the daemon has closed this connection (it does so to idle ones)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        # Readable between calls means end of file (or a stray notification, kept for `call`).
        return bool(readable) and sock.recv(1, _socket.MSG_PEEK) == b""
    except OSError:
        return True


class Client:
    """A blocking client for the daemon.

    Args:
        socket_path: The daemon's socket (see `Client.from_env`).
        timeout: Seconds to wait for each message from the daemon (progress notifications
            count, so a long ingest that reports progress never times out).
        fallbacks: Other sockets to try, in order, when nobody answers on `socket_path`
            (`config.socket_candidates`); the first that answers is kept.

    Raises (from every method):
        DaemonNotRunning: Nothing answers on the socket.
        RecalldError: The daemon's own error, as the same class.
    """

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        fallbacks: Sequence[str | os.PathLike[str]] = (),
    ) -> None:
        # Places as the strings `pathlib` would print: pathlib costs `recalld search` ~4 ms of
        # start-up (issue 20); `socket_path` and `fallbacks` give them as `Path`s.
        self._socket = posix_path(os.fspath(socket_path))
        others = (posix_path(os.fspath(p)) for p in fallbacks)
        self._fallbacks = [p for p in others if p != self._socket]
        self._places = [self._socket, *self._fallbacks]
        self.timeout = timeout
        self._sock: _socket.socket | None = None
        self._file: IO[bytes] | None = None
        self._ids = itertools.count(1)

    @property
    def socket_path(self) -> Path:
        """The daemon's socket: the first place, or the one that answered once one has."""
        from pathlib import Path

        return Path(self._socket)

    @socket_path.setter
    def socket_path(self, path: str | os.PathLike[str]) -> None:
        self._socket = posix_path(os.fspath(path))

    @property
    def fallbacks(self) -> list[Path]:
        """The other places tried, in order, when nobody answers on the first."""
        from pathlib import Path

        return [Path(p) for p in self._fallbacks]

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], config_file: Path | None = None, **kwargs: Any
    ) -> Client:
        """A client for the socket that `env` (e.g. `os.environ`) and the config name."""
        return cls(socket_from_env(env, config_file), **kwargs)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (a later call reconnects)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _connect(self) -> tuple[_socket.socket, IO[bytes]]:
        if self._sock is not None and _closed_by_peer(self._sock):
            self.close()  # the daemon closes connections left idle; open a new one
        if self._sock is None or self._file is None:
            first: OSError | None = None
            for path in self._places:
                opened = self._open(path)
                if isinstance(opened, OSError):
                    first = first or opened
                    continue
                # Elsewhere? The first place that answers is kept (issue 17).
                self._socket, sock = path, opened
                break
            else:
                assert first is not None
                raise not_running(self._places[0], first, self._places[1:]) from None
            self._sock, self._file = sock, io.BufferedReader(_SocketReader(sock))
        return self._sock, self._file

    def _open(self, path: str) -> _socket.socket | OSError:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            return exc
        return sock

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        on_progress: ProgressCallback | None = None,
    ) -> Any:
        """Call any method; progress notifications for it go to `on_progress`.

        Returns:
            The method's result.
        """
        sock, reader = self._connect()
        request_id = next(self._ids)
        try:
            sock.sendall(protocol.dumps(protocol.request(request_id, method, params)))
            while True:
                line = reader.readline(protocol.MAX_LINE_BYTES + 1)
                if not line:
                    raise DaemonError(
                        "the daemon closed the connection; it may be shutting "
                        "down, see `recalld status`"
                    )
                message = protocol.parse_incoming(line)
                if message.is_notification:
                    if (
                        message.method == protocol.PROGRESS
                        and on_progress is not None
                        and message.params.get("token") == request_id
                    ):
                        on_progress(message.params)
                    continue
                if message.id == request_id or message.error is not None:
                    break
        except TimeoutError:
            self.close()
            raise DaemonError(f"no answer from the daemon within {self.timeout} s") from None
        except (BrokenPipeError, ConnectionResetError):
            # Refused (busy) or dropped: read what the daemon said before it closed.
            try:
                sock.settimeout(1.0)
                last = reader.readline(protocol.MAX_LINE_BYTES + 1)
            except OSError:
                last = b""
            self.close()
            raise dropped(last) from None
        except protocol.RpcError as exc:
            self.close()
            raise DaemonError(f"bad message from the daemon: {exc.message}") from None
        except BaseException:
            # An interrupt may leave half a response on the wire: start afresh next time.
            self.close()
            raise
        if message.error is not None:
            raise error_from_object(message.error)
        return message.result

    def search(
        self,
        query: str,
        *,
        limit: int | None = None,
        mode: str | None = None,
        filters: Mapping[str, Any] | None = None,
        explain: bool = False,
        expand: int | None = None,
        budget_tokens: int | None = None,
        time_aware: bool | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Hybrid search. `filters` takes sources, kinds, granularities, tags, since, until;
        `budget_tokens` packs the hits to that many model tokens (the result's `packing`
        says what was used and dropped); `time_aware=False` ignores time words in the query;
        `settings` are search options for this call (`{"limit": 2, "mmr": True}`)."""
        result: dict[str, Any] = self.call(
            "search",
            search_params(
                query, limit, mode, filters, explain, expand, budget_tokens, time_aware, settings
            ),
        )
        return result

    def get(self, chunk_id: int) -> dict[str, Any]:
        """One chunk by id."""
        result: dict[str, Any] = self.call("get", {"id": chunk_id})
        return result

    def remember(
        self,
        text: str,
        *,
        memory_type: str = "semantic",
        tags: Sequence[str] = (),
        importance: float = 0.5,
        event_time: float | str | None = None,
        project: str | None = None,
    ) -> dict[str, Any]:
        """Store a memory written directly; `project` (a folder) scopes it to that project."""
        result: dict[str, Any] = self.call(
            "remember", remember_params(text, memory_type, tags, importance, event_time, project)
        )
        return result

    def context(
        self,
        event: str,
        *,
        project: str | None = None,
        prompt: str | None = None,
        budget_tokens: int | None = None,
        session_id: str | None = None,
        transcript_path: str | None = None,
    ) -> dict[str, Any]:
        """What an agent hook injects at `start` or for a `prompt`, or (`stop`) capture a
        transcript; see docs/protocol.md."""
        result: dict[str, Any] = self.call(
            "context",
            context_params(event, project, prompt, budget_tokens, session_id, transcript_path),
        )
        return result

    def forget(self, source: str | None = None, *, chunk_id: int | None = None) -> dict[str, Any]:
        """Remove a document or memory by source, or the one holding a chunk."""
        result: dict[str, Any] = self.call("forget", forget_params(source, chunk_id))
        return result

    def forget_query(
        self,
        query: str,
        *,
        limit: int | None = None,
        filters: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Preview what `query` would forget (memories only unless `filters` say otherwise):
        the matches and a `token`; nothing is removed until `forget_confirm(token)`."""
        result: dict[str, Any] = self.call("forget", forget_query_params(query, limit, filters))
        return result

    def forget_confirm(self, token: str) -> dict[str, Any]:
        """Remove exactly what the `forget_query` that gave `token` listed."""
        result: dict[str, Any] = self.call("forget", {"token": token})
        return result

    def update(
        self,
        chunk_id: int,
        *,
        text: str | None = None,
        memory_type: str | None = None,
        tags: Sequence[str] | None = None,
        importance: float | None = None,
        event_time: float | str | None = None,
    ) -> dict[str, Any]:
        """Edit a memory; the replaced version is kept in its history."""
        result: dict[str, Any] = self.call(
            "memories/update",
            update_params(chunk_id, text, memory_type, tags, importance, event_time),
        )
        return result

    def history(self, chunk_id: int) -> dict[str, Any]:
        """A memory's current text and earlier versions."""
        result: dict[str, Any] = self.call("memories/history", {"id": chunk_id})
        return result

    def link(self, src: int, dst: int, relation: str, *, weight: float = 1.0) -> dict[str, Any]:
        """Link two chunks: `src` <relation> `dst`."""
        result: dict[str, Any] = self.call("links/add", link_params(src, dst, relation, weight))
        return result

    def links(
        self, chunk_id: int, *, relation: str | None = None, direction: str = "both"
    ) -> list[dict[str, Any]]:
        """The links of a chunk (`in`, `out` or `both`)."""
        params = links_params(chunk_id, relation, direction)
        result: list[dict[str, Any]] = (self.call("links/list", params))["links"]
        return result

    def unlink(self, src: int, dst: int, *, relation: str | None = None) -> dict[str, Any]:
        """Remove the links from `src` to `dst` (one relation, or all)."""
        result: dict[str, Any] = self.call("links/remove", link_params(src, dst, relation, None))
        return result

    def ingest(
        self,
        path: str | os.PathLike[str],
        *,
        on_progress: ProgressCallback | None = None,
        exclude: Sequence[str] = (),
        allow_secrets: bool = False,
    ) -> dict[str, Any]:
        """Ingest a file or folder now and return its report; the daemon runs it as a job,
        followed here with progress (job figures) to `on_progress`, across timeouts and
        reconnections. `exclude` adds gitignore-style patterns; `allow_secrets` lets in
        deny-listed files unredacted.

        Raises:
            IngestError: The job was cancelled (e.g. `recalld jobs cancel`).
        """
        job = (self.call("ingest", ingest_params(path, exclude, allow_secrets)))["job"]
        return ingest_result(self.wait_job(job["id"], on_progress=on_progress))

    def start_ingest(
        self,
        path: str | os.PathLike[str],
        *,
        exclude: Sequence[str] = (),
        allow_secrets: bool = False,
    ) -> dict[str, Any]:
        """Start ingesting a file or folder as a job and return the job at once."""
        result: dict[str, Any] = (self.call("ingest", ingest_params(path, exclude, allow_secrets)))[
            "job"
        ]
        return result

    def jobs(self) -> list[dict[str, Any]]:
        """Every job the daemon knows: queued, running and recently finished."""
        result: list[dict[str, Any]] = (self.call("jobs/list"))["jobs"]
        return result

    def job(self, job_id: str) -> dict[str, Any]:
        """One job: its state and figures (files and chunks done, rate, ETA, current file)."""
        result: dict[str, Any] = self.call("jobs/get", {"id": job_id})
        return result

    def wait_job(
        self, job_id: str, *, on_progress: ProgressCallback | None = None
    ) -> dict[str, Any]:
        """Follow a job until it ends and return it; its figures go to `on_progress`.

        Each wait is shorter than the client's timeout; a timeout or a dropped connection
        reconnects and follows on, and only a daemon gone for `RECONNECT_S` ends it.
        """
        down_since: float | None = None
        while True:
            try:
                job: dict[str, Any] = self.call(
                    "jobs/wait",
                    {"id": job_id, "timeout_s": wait_slice(self.timeout)},
                    on_progress=on_progress,
                )
            except RecalldError as exc:
                if not follow_again(exc):
                    raise
                self.close()
                if isinstance(exc, (DaemonNotRunning, DaemonBusy)):
                    now = time.monotonic()
                    down_since = down_since or now
                    if now - down_since > RECONNECT_S:
                        raise
                    time.sleep(RECONNECT_PAUSE_S)
                continue
            down_since = None
            if on_progress is not None:
                on_progress(job)
            if job["state"] in JOB_FINAL:
                return job

    def cancel_job(self, job_id: str) -> dict[str, Any]:
        """Cancel a queued or running job; returns it once stopped."""
        result: dict[str, Any] = self.call("jobs/cancel", {"id": job_id})
        return result

    def sources_list(self) -> list[dict[str, Any]]:
        """Every watched folder."""
        result: list[dict[str, Any]] = self.call("sources/list")["sources"]
        return result

    def browse(
        self,
        what: str = "documents",
        *,
        sources: Sequence[str] = (),
        kinds: Sequence[str] = (),
        tags: Sequence[str] = (),
        since: float | str | None = None,
        until: float | str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> dict[str, Any]:
        """A page of `documents`, `memories` or `sources`: `items`, `total`, `next_offset`."""
        params = list_params(what, sources, kinds, tags, since, until, limit, offset)
        result: dict[str, Any] = self.call("list", params)
        return result

    def forget_path(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """Remove every document under a folder or matching a glob, and keep them out."""
        result: dict[str, Any] = self.call("forget/path", {"path": absolute(path)})
        return result

    def ignored(self) -> list[dict[str, Any]]:
        """The forgotten paths and globs kept out of the store."""
        result: list[dict[str, Any]] = (self.call("ignored/list"))["ignored"]
        return result

    def unforget(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """Let a forgotten path or glob in again."""
        result: dict[str, Any] = self.call("ignored/remove", {"path": absolute(path)})
        return result

    def sources_add(
        self, path: str | os.PathLike[str], *, kind: str = "auto", exclude: Sequence[str] = ()
    ) -> dict[str, Any]:
        """Watch a folder from now on, without what matches `exclude` (gitignore-style)."""
        params = sources_add_params(path, kind, exclude)
        result: dict[str, Any] = self.call("sources/add", params)
        return result

    def sources_remove(
        self, path: str | os.PathLike[str], *, forget: bool = False
    ) -> dict[str, Any]:
        """Stop watching a folder (and forget its documents with `forget=True`)."""
        result: dict[str, Any] = self.call(
            "sources/remove", {"path": absolute(path), "forget": forget}
        )
        return result

    def status(self) -> dict[str, Any]:
        """Versions, model, counts, queue depths, uptime."""
        result: dict[str, Any] = self.call("status")
        return result

    def calibrate(self) -> dict[str, Any]:
        """Calibrate the store's fusion on its own content now; returns what it chose."""
        result: dict[str, Any] = self.call("calibrate")
        return result

    def errors(self, *, limit: int = 100) -> list[dict[str, Any]]:
        """The most recent ingest errors."""
        result: list[dict[str, Any]] = self.call("errors/list", {"limit": limit})["errors"]
        return result

    def check(self, *, repair: bool = False) -> dict[str, Any]:
        """Verify the store's invariants; with `repair`, restore them first."""
        result: dict[str, Any] = self.call("admin/check", {"repair": repair})
        return result

    def config_show(self) -> dict[str, Any]:
        """The daemon's effective settings and their sources."""
        result: dict[str, Any] = self.call("config/show")
        return result

    def export(
        self,
        write: Callable[[str], object],
        *,
        vectors: bool = False,
        on_progress: ProgressCallback | None = None,
    ) -> dict[str, Any]:
        """Stream the store as JSONL to `write` (e.g. a text file's `write`), batch by batch.

        Returns:
            `{"lines", "counts", "skipped_partial"}`: what was written.
        """
        result: dict[str, Any] = self.call(
            "export", {"vectors": vectors}, on_progress=export_sink(write, on_progress)
        )
        return result

    def import_file(
        self,
        path: str | os.PathLike[str],
        *,
        replace: bool = False,
        on_progress: ProgressCallback | None = None,
        allow_secrets: bool = False,
    ) -> dict[str, Any]:
        """Import an export file (the daemon reads it); `replace` overwrites documents whose
        stored content differs from the file's. Secrets in its texts are redacted as ingest
        redacts them unless `allow_secrets`."""
        result: dict[str, Any] = self.call(
            "import",
            import_params(path, replace, allow_secrets),
            on_progress=on_progress,
        )
        return result

    def models(self) -> dict[str, Any]:
        """The embedding models one can choose, the store's, and a reindex target."""
        result: dict[str, Any] = self.call("models/list")
        return result

    def reindex(
        self,
        model: str | None = None,
        *,
        detach: bool = False,
        on_progress: ProgressCallback | None = None,
    ) -> dict[str, Any]:
        """Re-embed the store with `model` (None: follow the reindex running); unless
        `detach`, return when the new model is live, with progress to `on_progress`."""
        params = reindex_params(model, detach)
        result: dict[str, Any] = self.call("reindex", params, on_progress=on_progress)
        return result

    def tune(
        self,
        *,
        dry_run: bool = False,
        switch: bool = False,
        max_steps: int | None = None,
        max_seconds: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> dict[str, Any]:
        """Tune the store's local model on its own content (`recalld tune`); with `switch`,
        start the reindex onto a model the eval gate accepted."""
        params = tune_params(dry_run, switch, max_steps, max_seconds)
        result: dict[str, Any] = self.call("tune", params, on_progress=on_progress)
        return result

    def reindex_cancel(self) -> dict[str, Any]:
        """Stop the reindex in progress and drop the vectors it made."""
        result: dict[str, Any] = self.call("reindex/cancel")
        return result

"""The daemon's lifecycle, split uvicorn-style: `Config` (what to run), `Server` (running it).

    startup ─▶ serve until the stop Event is set ─▶ shutdown
      │           (SIGINT / SIGTERM set it; SIGHUP reloads the config)
      ├ resolve settings                      ├ refuse new requests (-32001), stop accepting
      ├ lock the store, bind the socket       ├ let requests in flight finish (timeout)
      ├ create the drop folder                ├ drain the ingest queue (timeout)
      ├ open the store and the model          ├ close the store
      └ watch sources, reconcile them         └ unlink the socket, release the lock

A failure before serving (bad config, locked store, live socket, model mismatch) exits with
`STARTUP_FAILURE` (3) after a one-line reason on stderr. Logging is configured here and only
here, from one dictConfig, and only when the daemon is the process's entry point.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import logging.config
import os
import signal
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from recalld import __version__, private
from recalld.api import AsyncMemory
from recalld.config import LoadedSettings, load_settings
from recalld.daemon.methods import Context, Dispatcher
from recalld.daemon.server import SocketServer, StoreLock
from recalld.daemon.sources import SOURCES_FILE, SourceRegistry
from recalld.embeddings.base import Embedder
from recalld.errors import RecalldError, StoreGoneError
from recalld.ingest.admission import Admission
from recalld.ingest.forgotten import ForgottenPaths
from recalld.ingest.scheduler import Scheduler
from recalld.ingest.watcher import PathFilter, Watcher
from recalld.masking import mask
from recalld.storage import forgotten as stored_forgotten
from recalld.storage.sqlite.connection import UNREADABLE, damaged_error

logger = logging.getLogger(__name__)

STARTUP_FAILURE = 3
WATCH_SETTLE_S = 1.0
# How often the store's files are checked for having been deleted under the daemon.
STORE_FILES_CHECK_S = 2.0
# After a stop, how long blocked threads may hold up the process's exit.
EXIT_GRACE_S = 5.0
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")


class TextFormatter(logging.Formatter):
    """The text log line, with any URL's password masked (`recalld.masking`)."""

    def format(self, record: logging.LogRecord) -> str:
        """Render `record` as one text line (plus its traceback)."""
        return mask(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per record, for journald and log shippers; passwords masked."""

    def format(self, record: logging.LogRecord) -> str:
        """Render `record` as compact JSON."""
        payload: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": mask(record.getMessage()),
        }
        if record.exc_info:
            payload["exc"] = mask(self.formatException(record.exc_info))
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def logging_config(level: str = "info", fmt: str = "text") -> dict[str, Any]:
    """The daemon's one dictConfig: stderr, `level`, text or JSON lines."""
    formatter: dict[str, Any] = (
        {"()": f"{__name__}.JsonFormatter"}
        if fmt == "json"
        else {
            "()": f"{__name__}.TextFormatter",
            "format": "%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        }
    )
    handler = {
        "class": "logging.StreamHandler",
        "stream": "ext://sys.stderr",
        "formatter": "default",
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "handlers": {"stderr": handler},
        "loggers": {
            "recalld": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "watchfiles": {"handlers": ["stderr"], "level": "WARNING", "propagate": False},
        },
    }


def configure_logging(level: str = "info", fmt: str = "text") -> None:
    """Configure logging for the daemon process (its entry point calls this, nothing else)."""
    logging.config.dictConfig(logging_config(level, fmt))


@dataclass
class Config:
    """What the daemon needs to start.

    Attributes:
        config_file: A config.toml; None means the default path if it exists.
        env: The environment to resolve settings from (`os.environ` for the real daemon).
        overrides: `--set section.key=value` flags.
        log_level, log_format: Used only when `configure_logging` is set.
        configure_logging: Set by the command-line entry point; tests leave logging alone.
        install_signal_handlers: SIGINT / SIGTERM stop, SIGHUP reloads.
        shutdown_timeout: Seconds for requests in flight and for draining the ingest queue.
        debounce: Seconds a changed file must stay quiet before it is ingested.
        embedder: An already-loaded model to share (tests); default: `embed.model`.
    """

    config_file: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    overrides: Mapping[str, str] = field(default_factory=dict)
    log_level: str = "info"
    log_format: str = "text"
    configure_logging: bool = False
    install_signal_handlers: bool = True
    shutdown_timeout: float = 10.0
    debounce: float = 0.3
    embedder: Embedder | None = None

    def load(self) -> LoadedSettings:
        """Resolve the settings (defaults < file < env < flags)."""
        return load_settings(self.config_file, self.env, self.overrides)


class Server:
    """Runs one daemon: `await Server(config).serve()` returns the process exit code."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.should_exit = asyncio.Event()
        self.started = asyncio.Event()
        self.dispatcher = Dispatcher()
        self.memory: AsyncMemory | None = None
        self.scheduler: Scheduler | None = None
        self.sources: SourceRegistry | None = None
        self.watcher: Watcher | None = None
        self._lock: StoreLock | None = None
        self._socket: SocketServer | None = None
        self._watch_stop = asyncio.Event()
        self._reloads: set[asyncio.Task[None]] = set()

    async def serve(self) -> int:
        """Start, serve until stopped, shut down.

        Returns:
            0 after a clean stop, `STARTUP_FAILURE` (3) when it could not start, 1 when a task
            failed unexpectedly.
        """
        self._install_signal_handlers()
        try:
            try:
                if not await self._start_unless_stopped():
                    return 0
            except RecalldError as exc:
                logger.error("cannot start: %s", exc.message)
                return STARTUP_FAILURE
            except OSError as exc:
                logger.error("cannot start: %s", exc)
                return STARTUP_FAILURE
            except UNREADABLE as exc:
                # A page found damaged after the file opened (a count, a scan at start-up).
                path = self.config.load().settings.store_path
                logger.error("cannot start: %s", damaged_error(path, exc).message)
                return STARTUP_FAILURE
            try:
                await self.main_loop()
            except Exception:
                logger.exception("recalld stopped on an unexpected error")
                return 1
            return 0
        finally:
            await self.shutdown()
            self._remove_signal_handlers()

    async def _start_unless_stopped(self) -> bool:
        """Run `startup`, unless SIGTERM/SIGINT comes first: a model load or an embedding
        endpoint that hangs must not keep a daemon that was told to stop. False if stopped."""
        starting = asyncio.ensure_future(self.startup())
        stopping = asyncio.ensure_future(self.should_exit.wait())
        try:
            await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if starting.done():
            starting.result()  # its error, if it failed
            return True
        starting.cancel()
        await asyncio.wait({starting})
        logger.info("stopped while starting")
        return False

    async def startup(self) -> None:
        """Take the store lock, bind the socket, open the store, start watching.

        Raises:
            RecalldError: Anything that keeps the daemon from serving (exit code 3).
        """
        loaded = self.config.load()
        settings = loaded.settings
        private.private_dir(settings.data_dir)
        self._lock = StoreLock(settings.store_path, identity=not settings.store_url)
        self._lock.acquire()
        # Bind early: a second daemon sees a live socket, clients get "starting" not "absent".
        socket_server = SocketServer(settings.socket_path, self.dispatcher)
        await socket_server.start()
        self._socket = socket_server
        drop = settings.drop_folder
        if not drop.is_dir():  # new: private like the data folder it usually sits in
            private.private_dir(drop)
        logger.info("drop folder: %s (files copied here are ingested)", drop)
        # A model the user did not choose follows the store (it may have been re-embedded).
        follow = loaded.sources.get("embed.model", "default") == "default"
        self.memory = await AsyncMemory.open(
            settings, embedder=self.config.embedder, follow_store=follow
        )
        self._lock.lock_store_file()  # a new store exists only now
        self.sources = SourceRegistry(settings)
        wanted = PathFilter(
            excluded=[settings.store_path, self._lock.path, Path(settings.data_dir) / SOURCES_FILE]
        )
        sources = self.sources
        kept_out = await self.memory.store.read(stored_forgotten.entries)
        admission = Admission(
            settings.privacy,
            roots=lambda: [s.path for s in sources.all()],
            forgotten=ForgottenPaths(e["pattern"] for e in kept_out),
        )
        self.scheduler = Scheduler(
            self.memory.ingestor, wanted, debounce=self.config.debounce, admission=admission
        )
        self.scheduler.sources = tuple(self.sources.all())
        self.watcher = Watcher(self.scheduler.notify, wanted)
        self.dispatcher.context = Context(
            loaded=loaded,
            memory=self.memory,
            scheduler=self.scheduler,
            sources=self.sources,
            socket_path=settings.socket_path,
            sources_changed=self.sources_changed,
            watching=self.watcher.state,
        )
        for source in self.sources.all():
            self.scheduler.scan(source.path)
        await self._requeue_partial()
        try:
            await self.memory.reindexer.resume()
        except RecalldError as exc:
            # The store keeps serving with its model; `status` and `reindex --cancel` help.
            logger.error("cannot resume the reindex: %s", exc.message)
        logger.info(
            "recalld %s ready: store %s, model %s, %d sources, socket %s",
            __version__,
            settings.store_path,
            self.memory.embedder.model_id,
            len(self.sources.all()),
            settings.socket_path,
        )
        self.started.set()

    async def _requeue_partial(self) -> None:
        # Documents under a source are found by the reconcile; these are the others.
        assert self.memory is not None and self.scheduler is not None
        counts = await self.memory.counts()
        if not counts.get("partial_documents"):
            return
        docs = await self.memory.store.read(lambda c: c.documents("/", 10**9))
        for doc in docs:
            if doc.state == "partial" and self.scheduler.source_for(Path(doc.source)) is None:
                logger.info("re-ingesting partial document %s", doc.source)
                self.scheduler.notify(Path(doc.source), False)

    async def main_loop(self) -> None:
        """Serve until `should_exit` is set, with every task supervised by one TaskGroup."""
        assert self.scheduler is not None and self._socket is not None
        async with asyncio.TaskGroup() as group:
            group.create_task(
                self.scheduler.run(self.should_exit, self.config.shutdown_timeout),
                name="recalld-scheduler",
            )
            group.create_task(self._watch_loop(), name="recalld-watcher")
            group.create_task(self._watch_store_files(), name="recalld-store-files")
            if self.memory is not None and self.memory.settings.search.self_tune:
                # Fusion chosen on the store's own content, redone as it changes (issue 14).
                group.create_task(
                    self.memory.keep_calibrated(self.should_exit), name="recalld-calibration"
                )
            await self.should_exit.wait()
            logger.info("shutting down")
            self.dispatcher.shutting_down = True
            self._watch_stop.set()
            if self.dispatcher.context is not None:
                await self.dispatcher.context.jobs.stop()  # before followers are waited for
            await self._socket.stop(self.config.shutdown_timeout)

    async def _watch_loop(self) -> None:
        assert self.watcher is not None and self.sources is not None
        watched: set[Path] = set()
        async with asyncio.TaskGroup() as group:
            while not self.should_exit.is_set():
                self._watch_stop = asyncio.Event()
                roots = [s.path for s in self.sources.all()]
                # A file created between a folder's scan and the moment its inotify watch
                # exists would be missed until the next start: scan new roots once more when
                # the watcher has settled. The scan skips what it already has.
                if new := [r for r in roots if r not in watched]:
                    group.create_task(self._rescan_later(new))
                watched = set(roots)
                await self.watcher.run(roots, self._watch_stop)

    async def _watch_store_files(self) -> None:
        # A deleted `-wal` is noticed (and what it holds saved) even when nothing writes.
        assert self.memory is not None
        while not self.should_exit.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STORE_FILES_CHECK_S):
                    await self.should_exit.wait()
            try:
                await self.memory.store.check_files()
            except StoreGoneError:
                return  # logged; every write is refused from now on

    async def _rescan_later(self, roots: list[Path]) -> None:
        assert self.scheduler is not None
        try:
            async with asyncio.timeout(WATCH_SETTLE_S):
                await self.should_exit.wait()
        except TimeoutError:
            for root in roots:
                self.scheduler.scan(root)

    def sources_changed(self) -> None:
        """Restart the watcher on the current sources."""
        assert self.scheduler is not None and self.sources is not None
        self.scheduler.sources = tuple(self.sources.all())
        self._watch_stop.set()

    async def reload(self) -> None:
        """Re-read the config (SIGHUP): sources, search and privacy settings (ignore rules,
        excludes, deny-list, symlinks, redaction) apply at once."""
        if self.dispatcher.context is None or self.sources is None or self.memory is None:
            return
        try:
            loaded = self.config.load()
        except RecalldError as exc:
            logger.error("reload failed, keeping the old settings: %s", exc.message)
            return
        old = self.dispatcher.context.loaded.settings
        new = loaded.settings
        for name, before, after in (
            ("store path", old.store_path, new.store_path),
            ("embedding model", old.embed.model, new.embed.model),
            ("socket", old.socket_path, new.socket_path),
        ):
            if before != after:
                logger.warning(
                    "%s changed from %s to %s; restart recalld to apply it", name, before, after
                )
        before_roots = {s.path for s in self.sources.all()}
        self.sources.apply_settings(new)
        self.memory.searcher.settings = new.search
        assert self.scheduler is not None
        try:
            old_admission = self.scheduler.admission
            self.scheduler.admission = Admission(
                new.privacy, roots=old_admission.roots, forgotten=old_admission.forgotten
            )
            self.memory.ingestor.use_privacy(new.privacy)
        except RecalldError as exc:
            logger.error("keeping the old privacy settings: %s", exc.message)
        self.dispatcher.context = replace(self.dispatcher.context, loaded=loaded)
        self.sources_changed()
        assert self.scheduler is not None
        for source in self.sources.all():
            if source.path not in before_roots:
                if source.origin == "drop":
                    source.path.mkdir(parents=True, exist_ok=True)
                self.scheduler.scan(source.path)
        logger.info("reloaded the config: %d sources", len(self.sources.all()))

    async def shutdown(self) -> None:
        """Close the store, unlink the socket and release the lock (safe to call twice)."""
        self.dispatcher.shutting_down = True
        if self._socket is not None:
            await self._socket.stop(0)
            self._socket = None
        if self.memory is not None:
            await self.memory.close()
            self.memory = None
            logger.info("store closed")
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _install_signal_handlers(self) -> None:
        if not self.config.install_signal_handlers:
            return
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._handle_exit, sig)
        loop.add_signal_handler(signal.SIGHUP, self._handle_reload)

    def _remove_signal_handlers(self) -> None:
        if not self.config.install_signal_handlers:
            return
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(sig)

    def _handle_exit(self, sig: signal.Signals) -> None:
        if self.should_exit.is_set():
            logger.info("%s again: already shutting down", sig.name)
            return
        logger.info("received %s", sig.name)
        self.should_exit.set()

    def _handle_reload(self) -> None:
        task = asyncio.get_running_loop().create_task(self.reload())
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)


def run(config: Config) -> int:
    """Run the daemon in this process (the `recalld serve` entry point). Returns the exit code."""
    if config.configure_logging:
        configure_logging(config.log_level, config.log_format)

    async def serve() -> int:
        code = await Server(config).serve()
        _exit_anyway(code, EXIT_GRACE_S)
        return code

    try:
        return asyncio.run(serve())
    except KeyboardInterrupt:  # pragma: no cover - only before the handlers are installed
        return 130
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()


def _exit_anyway(code: int, grace: float) -> None:
    """Exit with `code` in `grace` s if the interpreter has not by then.

    Called once the store is closed and the socket and lock are gone, so nothing is lost: a
    thread still blocked (a file read on a hung mount, a stuck request) would otherwise keep a
    stopped daemon alive, since Python waits for worker threads at exit.
    """

    def exit_now() -> None:
        logger.warning("threads still blocked %g s after stopping; exiting anyway", grace)
        with contextlib.suppress(Exception):
            logging.shutdown()
            sys.stderr.flush()
        os._exit(code)

    timer = threading.Timer(grace, exit_now)
    timer.daemon = True
    timer.start()


def default_config(env: Mapping[str, str] | None = None, **kwargs: Any) -> Config:
    """A `Config` on the process environment, for the command line."""
    return Config(env=dict(os.environ if env is None else env), **kwargs)

"""Options every client command shares (`--config`, `--set`, `--json`), the decorators that
turn them into a connected client (`recalld.cli.connection` resolves them), and `run_offline`.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from recalld.cli.connection import client_for, connect, load

if TYPE_CHECKING:
    from recalld.api import AsyncMemory
    from recalld.config import Settings

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def run_offline(
    settings: Settings,
    work: Callable[[AsyncMemory], Awaitable[T]],
    through_daemon: str,
    closed: Callable[[Callable[[], T]], T] | None = None,
) -> T:
    """Run `work` on the store with the daemon stopped: its lock, the configured model and
    our own event loop. `through_daemon` names the command that does it through a daemon.

    `closed`, when given, is called under the lock with the opened run: it may work on the
    store file while it is closed (`check --repair` rebuilds a damaged one) before and after
    calling it, and returns what it returns."""
    # Imported only here: the store, the model and the ingest pipeline are heavy.
    import asyncio

    from recalld.api import AsyncMemory
    from recalld.daemon.server import StoreLock
    from recalld.errors import DaemonAlreadyRunning

    async def run() -> T:
        async with await AsyncMemory.open(settings) as memory:
            return await work(memory)

    lock = StoreLock(settings.store_path, identity=not settings.store_url)
    try:
        lock.acquire()
    except DaemonAlreadyRunning as exc:
        raise DaemonAlreadyRunning(
            f"{exc.message}; or do it through the daemon: {through_daemon}", data=exc.data
        ) from None
    try:
        if closed is not None:
            return closed(lambda: asyncio.run(run()))
        return asyncio.run(run())
    finally:
        lock.release()


def settings_options(func: F) -> F:
    """Add `--config FILE` and `--set KEY=VALUE`."""
    func = click.option(
        "--set",
        "sets",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override a setting, e.g. --set embed.model=local.",
    )(func)
    func = click.option(
        "--config",
        "config_file",
        metavar="FILE",
        type=click.Path(dir_okay=False, path_type=Path),
        help="A config.toml (default: the XDG config dir).",
    )(func)
    return func


def json_option(func: F) -> F:
    """Add `--json`: print the machine-readable result instead of a table."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(
        func
    )


def client_command(func: F) -> F:
    """A command that talks to the daemon: settings options and `--json`."""
    return settings_options(json_option(func))


def pass_client_and_settings(func: Callable[..., Any]) -> Callable[..., Any]:
    """Like `pass_client`, and also pass the resolved settings as `loaded` (for commands whose
    requests carry settings, e.g. `search`)."""

    @functools.wraps(func)
    def wrapper(*args: Any, config_file: Path | None, sets: tuple[str, ...], **kwargs: Any) -> Any:
        loaded = load(config_file, sets)
        with client_for(loaded) as client:
            return func(*args, client=client, loaded=loaded, **kwargs)

    return wrapper


def pass_client(func: Callable[..., Any]) -> Callable[..., Any]:
    """Replace `config_file` and `sets` with a connected `client` argument."""

    @functools.wraps(func)
    def wrapper(*args: Any, config_file: Path | None, sets: tuple[str, ...], **kwargs: Any) -> Any:
        with connect(config_file, sets) as client:
            return func(*args, client=client, **kwargs)

    return wrapper

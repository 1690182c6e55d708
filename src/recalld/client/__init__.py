"""Python clients for a running recalld daemon: `Client` (blocking) and `AsyncClient`.

    with Client(socket_path) as client:
        hits = client.search("sqlite wal", limit=5)["hits"]

Both speak the socket protocol (`recalld.protocol`) and raise the daemon's errors as the same
`recalld.errors` classes; `DaemonNotRunning` when nothing answers on the socket. Neither imports
the daemon, the model, numpy or markitdown, so they start fast.
"""

from __future__ import annotations

from recalld.client.base import error_from_object
from recalld.client.sync import Client

# typing is left out of `recalld search`'s start-up (issue 20): mypy reads this block only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from recalld.client.aio import AsyncClient

__all__ = ["AsyncClient", "Client", "error_from_object"]


def __getattr__(name: str) -> Any:
    # AsyncClient is imported on first use: asyncio (and ssl with it) costs a blocking client
    # such as `recalld search` ~50 ms of its start-up.
    if name == "AsyncClient":
        from recalld.client.aio import AsyncClient

        return AsyncClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

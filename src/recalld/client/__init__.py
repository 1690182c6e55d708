"""Python clients for a running recalld daemon: `Client` (blocking) and `AsyncClient`.

    with Client(socket_path) as client:
        hits = client.search("sqlite wal", limit=5)["hits"]

Both speak the socket protocol (`recalld.protocol`) and raise the daemon's errors as the same
`recalld.errors` classes; `DaemonNotRunning` when nothing answers on the socket. Neither imports
the daemon, the model, numpy or markitdown, so they start fast.
"""

from recalld.client.aio import AsyncClient
from recalld.client.base import error_from_object
from recalld.client.sync import Client

__all__ = ["AsyncClient", "Client", "error_from_object"]

"""The error tree of recalld. Every error the project raises on purpose is one of these.

    RecalldError                       -32000 base
    ├── ConfigError                    -32010
    ├── StoreError                     -32020
    │   ├── SchemaTooNewError          -32021
    │   ├── ModelMismatchError         -32022
    │   ├── IntegrityError             -32023
    │   ├── ReindexError               -32024
    │   ├── StoreFullError             -32026
    │   └── StoreGoneError             -32027
    ├── IngestError                    -32030
    │   ├── UnsupportedFormatError     -32031
    │   └── ParseError                 -32032
    ├── EmbeddingError                 -32040
    ├── QueryError                     -32050
    ├── NotFoundError                  -32060
    └── DaemonError                    -32070
        ├── DaemonNotRunning           -32071
        ├── DaemonAlreadyRunning       -32072
        ├── ProtocolError              -32073
        └── DaemonBusy                 -32074

Each class carries its JSON-RPC `code`, so the daemon maps exceptions to error objects in one
place and the client raises the same class back from `data.type`.
"""

from __future__ import annotations

# typing is left out of `recalld search`'s start-up (issue 20): mypy reads this block only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar


class RecalldError(Exception):
    """Root of every recalld error.

    Args:
        message: What went wrong and, where possible, what to do next.
        data: Structured detail that travels with the error over the socket.
    """

    code: ClassVar[int] = -32000

    def __init__(self, message: str, *, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = dict(data or {})


class ConfigError(RecalldError):
    """A setting is missing, malformed or contradicts another."""

    code = -32010


class StoreError(RecalldError):
    """The store cannot be opened or used as asked."""

    code = -32020


class SchemaTooNewError(StoreError):
    """The store was written by a newer recalld."""

    code = -32021


class ModelMismatchError(StoreError):
    """The store's vectors come from a different embedding model."""

    code = -32022


class IntegrityError(StoreError):
    """A store invariant does not hold."""

    code = -32023


class ReindexError(StoreError):
    """A reindex cannot start or go on (another one runs, nothing to cancel, ...)."""

    code = -32024


class StoreFullError(StoreError):
    """The disk holding the store is full: writes wait for space, nothing is dropped."""

    code = -32026


class StoreGoneError(StoreError):
    """A file of the open store was deleted or replaced under the daemon: writes are refused."""

    code = -32027


class IngestError(RecalldError):
    """A source could not be ingested."""

    code = -32030


class UnsupportedFormatError(IngestError):
    """The source's format is not one recalld reads."""

    code = -32031


class ParseError(IngestError):
    """The source claims a supported format but could not be parsed."""

    code = -32032


class EmbeddingError(RecalldError):
    """The embedding model or endpoint failed."""

    code = -32040


class QueryError(RecalldError):
    """A search request is malformed."""

    code = -32050


class NotFoundError(RecalldError):
    """The requested chunk, document or source does not exist."""

    code = -32060


class DaemonError(RecalldError):
    """The daemon cannot serve the request."""

    code = -32070


class DaemonNotRunning(DaemonError):
    """No daemon answers on the socket."""

    code = -32071


class DaemonAlreadyRunning(DaemonError):
    """Another daemon already serves this socket or store."""

    code = -32072


class ProtocolError(DaemonError):
    """A message on the socket broke the protocol."""

    code = -32073


class DaemonBusy(DaemonError):
    """The daemon runs but serves as many connections as it can; retry in a moment."""

    code = -32074


def error_classes() -> dict[str, type[RecalldError]]:
    """Every error class by name, for the client to raise errors back from `data.type`."""
    found: dict[str, type[RecalldError]] = {}
    pending: list[type[RecalldError]] = [RecalldError]
    while pending:
        cls = pending.pop()
        found[cls.__name__] = cls
        pending.extend(cls.__subclasses__())
    return found

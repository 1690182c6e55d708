"""The `export` and `import` methods: the store as JSONL, streamed out or read back in.

`export` runs the blocking exporter (`storage.registry.export_lines`) batch by batch in a
worker thread and sends each batch of lines to the client as a `progress` notification
(`{"lines": "…\\n…\\n"}`), so neither side ever holds the whole export. `import` reads a
file the daemon can open (the clients send an absolute path) and writes through the store's
single writer, one transaction per document (`storage.importer`), its secrets redacted
unless `allow_secrets`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recalld import __version__
from recalld.daemon.params import Params
from recalld.storage import importer, registry

if TYPE_CHECKING:
    from recalld.daemon.methods import Context

logger = logging.getLogger(__name__)

Progress = Callable[[dict[str, Any]], Awaitable[None]]

# Lines per notification are capped by size, far below the protocol's 8 MiB line limit.
BATCH_BYTES = 512 * 1024


def _take(lines: Iterator[str]) -> list[str]:
    """The next lines of the export, up to about `BATCH_BYTES` (blocking)."""
    limit = BATCH_BYTES
    batch: list[str] = []
    size = 0
    for line in lines:
        batch.append(line)
        size += len(line) + 1
        if size >= limit:
            break
    return batch


async def export(ctx: Context, params: Params, progress: Progress) -> Any:
    """Stream the store as JSONL lines in `progress` notifications; returns the footer."""
    vectors = params.boolean("vectors", False)
    params.done()
    lines = registry.export_lines(
        ctx.memory.store.path, vectors=vectors, recalld_version=__version__
    )
    sent = 0
    last = ""
    try:
        while batch := await asyncio.to_thread(_take, lines):
            sent += len(batch)
            last = batch[-1]
            await progress({"lines": "\n".join(batch) + "\n", "sent": sent})
    finally:
        await asyncio.to_thread(lines.close)
    footer = json.loads(last)
    return {
        "lines": sent,
        "counts": footer["counts"],
        "skipped_partial": footer["skipped_partial"],
        "skipped_unreadable": footer.get("skipped_unreadable", []),
    }


async def import_(ctx: Context, params: Params, progress: Progress) -> Any:
    """Import an export file the daemon can read; see `storage.importer`."""
    path = Path(params.path("path"))
    replace = params.boolean("replace", False)
    allow_secrets = params.boolean("allow_secrets", False)
    params.done()
    memory = ctx.memory
    return await importer.import_file(
        memory.store,
        path,
        memory.ingestor.embed,
        replace=replace,
        progress=progress,
        # Texts are redacted as ingest redacts them unless the user said otherwise.
        redact=None if allow_secrets else memory.ingestor.import_redaction(),
    )

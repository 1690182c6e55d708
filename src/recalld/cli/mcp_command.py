"""`recalld mcp`: the MCP server over stdio, for assistants and editors (see `recalld.mcp`)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import click

from recalld.cli.common import settings_options
from recalld.cli.connection import load
from recalld.config import request_settings, socket_candidates


@click.command("mcp")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="warning",
    show_default=True,
)
@settings_options
def mcp(log_level: str, sets: tuple[str, ...], config_file: Path | None) -> None:
    """Serve the Model Context Protocol on stdin/stdout (tools: search, remember, forget, get,
    ingest, list, status, context, edit, history, link, sources), talking to the running
    daemon. Start it from an MCP client's config."""
    # stdout carries the protocol: logs go to stderr, configured here as at any entry point.
    logging.basicConfig(
        level=log_level.upper(), stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    # Imported here: the mcp package (pydantic, starlette) is slow to import, and asyncio
    # would slow every other command's start.
    import asyncio

    from recalld.client.aio import AsyncClient
    from recalld.mcp.adapter import serve_stdio

    loaded = load(config_file, sets)
    settings = loaded.settings
    # An editor may start this with a bare environment: try the known places (issue 17).
    places = socket_candidates(loaded, os.environ)
    client = AsyncClient(places[0], timeout=settings.client.timeout_s or None, fallbacks=places[1:])
    asyncio.run(serve_stdio(client, request_settings(loaded)))

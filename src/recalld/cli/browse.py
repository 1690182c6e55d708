"""Seeing and undoing: `list`, and `unforget` (the way back from `forget PATH`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from recalld.cli.common import client_command, pass_client
from recalld.cli.output import emit, snippet, table, when
from recalld.client import Client
from recalld.types import KINDS, MEMORY_TYPES

if TYPE_CHECKING:
    from rich.console import Console

WHAT = ("documents", "memories", "sources")


def _rows(what: str, items: list[dict[str, Any]]) -> tuple[list[str], list[tuple[Any, ...]]]:
    if what == "documents":
        return ["id", "source", "kind", "chunks", "state", "stored"], [
            (d["id"], d["source"], d["kind"], d["chunks"], d["state"], when(d["updated_at"]))
            for d in items
        ]
    if what == "memories":
        return ["id", "type", "tags", "when", "text"], [
            (
                m["id"],
                m["type"] or "-",
                ", ".join(m["tags"]) or "-",
                when(m["event_time"] or m["created_at"]),
                snippet(m["text"], 80),
            )
            for m in items
        ]
    return source_rows(items)


def source_rows(items: list[dict[str, Any]]) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The columns of a sources table (`list sources`, `sources list`)."""
    return ["path", "kind", "origin", "docs", "chunks", "errors", "skipped", "last scan"], [
        (
            s["path"],
            s["kind"],
            s["origin"],
            s["documents"],
            s["chunks"],
            s["errors"],
            sum(s.get("skipped", {}).values()),
            when(s.get("last_scan")) if s.get("last_scan") else ("-" if s["exists"] else "MISSING"),
        )
        for s in items
    ]


@click.command("list")
@click.argument("what", type=click.Choice(WHAT), default="documents")
@click.option("--source", "sources", multiple=True, help="Only under this path or source prefix.")
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(sorted({*KINDS, *MEMORY_TYPES, "skipped"} - {"memory"})),
    help="Documents: text, code, conversation or skipped (no chunker takes them); memories: "
    "their type.",
)
@click.option("--tag", "tags", multiple=True, help="Only with this tag (repeat: all of them).")
@click.option("--since", help="Stored (memories: happened) at or after this ISO date.")
@click.option("--until", help="Stored (memories: happened) before this ISO date.")
@click.option("--limit", "-n", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--offset", type=click.IntRange(0), default=0, help="Skip this many (paging).")
@client_command
@pass_client
def list_(
    client: Client,
    what: str,
    sources: tuple[str, ...],
    kinds: tuple[str, ...],
    tags: tuple[str, ...],
    since: str | None,
    until: str | None,
    limit: int,
    offset: int,
    as_json: bool,
) -> None:
    """List what the store holds: documents (default), memories, or sources with counts.

    Documents are in source order, memories newest first; --offset pages through them.
    """
    page = client.browse(
        what,
        sources=sources,
        kinds=kinds,
        tags=tags,
        since=since,
        until=until,
        limit=limit,
        offset=offset,
    )

    def render(out: Console) -> None:
        columns, rows = _rows(what, page["items"])
        table(out, columns, rows)
        shown = f"{page['offset'] + 1}-{page['offset'] + len(page['items'])}"
        more = (
            f"; next page: --offset {page['next_offset']}"
            if page["next_offset"] is not None
            else ""
        )
        out.print(f"{shown if page['items'] else 'none'} of {page['total']} {what}{more}")

    emit(page, as_json, render)


@click.command()
@click.argument("path")
@client_command
@pass_client
def unforget(client: Client, path: str, as_json: bool) -> None:
    """Let a path or glob forgotten with `recalld forget PATH` in again (watched folders that
    hold it are rescanned). `recalld forget --list-ignored` shows what is forgotten."""
    result = client.unforget(path)
    emit(result, as_json, lambda out: out.print(f"{result['pattern']} may come in again."))

"""Commands for memory edits and links: `edit`, `history`, `link add|list|remove`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from recalld.cli.common import client_command, pass_client
from recalld.cli.output import emit, snippet, table, when
from recalld.client import Client
from recalld.types import MEMORY_TYPES

if TYPE_CHECKING:
    from rich.console import Console

# Kept here rather than imported from storage: the CLI stays light (no storage import).
RELATIONS = (
    "similar",
    "related",
    "contradicts",
    "extends",
    "supersedes",
    "caused_by",
    "temporal",
    "parent",
)


@click.command()
@click.argument("chunk_id", metavar="ID", type=int)
@click.argument("text", nargs=-1)
@click.option("--type", "memory_type", type=click.Choice(MEMORY_TYPES), help="New memory type.")
@click.option("--tag", "tags", multiple=True, help="Replace the tags; repeat for more.")
@click.option("--importance", type=click.FloatRange(0, 1), help="New importance.")
@click.option("--when", "event_time", help="New event time (ISO 8601).")
@client_command
@pass_client
def edit(
    client: Client,
    chunk_id: int,
    text: tuple[str, ...],
    memory_type: str | None,
    tags: tuple[str, ...],
    importance: float | None,
    event_time: str | None,
    as_json: bool,
) -> None:
    """Edit memory ID (new TEXT and/or fields); the old version is kept (`recalld history`)."""
    if not (text or memory_type or tags or importance is not None or event_time):
        raise click.UsageError(
            "give new TEXT or at least one of --type, --tag, --importance, --when"
        )
    result = client.update(
        chunk_id,
        text=" ".join(text) if text else None,
        memory_type=memory_type,
        tags=tags or None,
        importance=importance,
        event_time=event_time,
    )
    emit(
        result,
        as_json,
        lambda out: out.print(f"Memory {chunk_id} is now at version {result['version']}."),
    )


@click.command()
@click.argument("chunk_id", metavar="ID", type=int)
@client_command
@pass_client
def history(client: Client, chunk_id: int, as_json: bool) -> None:
    """Show memory ID's current text and its earlier versions."""
    result = client.history(chunk_id)

    def render(out: Console) -> None:
        rows = [
            (v["version"], when(v["valid_from"]), when(v["replaced_at"]), snippet(v["text"]))
            for v in result["history"]
        ]
        rows.append((result["version"], "", "current", snippet(result["text"])))
        table(out, ["version", "from", "replaced", "text"], rows, title=f"memory {chunk_id}")

    emit(result, as_json, render)


@click.group()
def link() -> None:
    """Typed links between chunks (similar, supersedes, temporal, ...)."""


@link.command("add")
@click.argument("src", type=int)
@click.argument("dst", type=int)
@click.option("--relation", "-r", type=click.Choice(RELATIONS), required=True)
@click.option("--weight", type=click.FloatRange(0, 1), default=1.0, show_default=True)
@client_command
@pass_client
def link_add(
    client: Client, src: int, dst: int, relation: str, weight: float, as_json: bool
) -> None:
    """Link chunk SRC to chunk DST: "SRC <relation> DST"."""
    result = client.link(src, dst, relation, weight=weight)
    emit(result, as_json, lambda out: out.print(f"Linked {src} -{relation}-> {dst}."))


@link.command("list")
@click.argument("chunk_id", metavar="ID", type=int)
@click.option("--relation", "-r", type=click.Choice(RELATIONS))
@click.option("--direction", type=click.Choice(["in", "out", "both"]), default="both")
@client_command
@pass_client
def link_list(
    client: Client, chunk_id: int, relation: str | None, direction: str, as_json: bool
) -> None:
    """The links of chunk ID."""
    found = client.links(chunk_id, relation=relation, direction=direction)

    def render(out: Console) -> None:
        if not found:
            out.print("No links.")
            return
        rows = [(x["src"], x["relation"], x["dst"], x["weight"], x["origin"]) for x in found]
        table(out, ["src", "relation", "dst", "weight", "origin"], rows)

    emit(found, as_json, render)


@link.command("remove")
@click.argument("src", type=int)
@click.argument("dst", type=int)
@click.option("--relation", "-r", type=click.Choice(RELATIONS), help="Only this relation.")
@client_command
@pass_client
def link_remove(client: Client, src: int, dst: int, relation: str | None, as_json: bool) -> None:
    """Remove the links from SRC to DST."""
    result = client.unlink(src, dst, relation=relation)
    emit(result, as_json, lambda out: out.print(f"Removed {result['removed']} link(s)."))

"""Commands that read and write memory: `search`, `remember`, `get`, `forget`."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from recalld.cli.common import client_command, pass_client, pass_client_and_settings
from recalld.cli.output import emit, snippet, table, when
from recalld.cli.searching import SEARCH_MODES, search_and_show
from recalld.client import Client
from recalld.config import LoadedSettings, request_settings
from recalld.projects import project_of
from recalld.types import GRANULARITIES, KINDS, MEMORY_TYPES

if TYPE_CHECKING:
    from rich.console import Console

F = TypeVar("F", bound=Callable[..., Any])


def project_option(help_text: str) -> Callable[[F], F]:
    """`--project [DIR]`: the project of DIR (its git root, or DIR itself); alone, of here."""
    return click.option(
        "--project",
        "project",
        is_flag=False,
        flag_value=".",
        default=None,
        metavar="[DIR]",
        type=click.Path(file_okay=False),
        help=help_text,
    )


@click.command()
@click.argument("query", nargs=-1, required=True)
@click.option("--limit", "-n", type=click.IntRange(1, 1000), help="How many hits.")
@click.option("--mode", type=click.Choice(SEARCH_MODES), help="Retrieval routes to use.")
@click.option("--explain", is_flag=True, help="Show how each hit was found.")
@click.option(
    "--expand",
    type=click.IntRange(0, 20),
    help="Attach N neighbouring chunks (or the parent) to each hit.",
)
@click.option("--source", "sources", multiple=True, help="Only under this source prefix.")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(KINDS))
@click.option("--granularity", "granularities", multiple=True, type=click.Choice(GRANULARITIES))
@click.option("--tag", "tags", multiple=True, help="Only chunks with this tag.")
@click.option("--since", "--after", "since", help="Only events at or after this date (ISO 8601).")
@click.option("--until", "--before", "until", help="Only events before this date (ISO 8601).")
@click.option(
    "--budget",
    type=click.IntRange(1, 1_000_000),
    help="Pack the hits (with parent context for facts) into this many model tokens.",
)
@click.option(
    "--no-time",
    "no_time",
    is_flag=True,
    help='Ignore time words in the query ("last week", "the first time").',
)
@project_option("Only this project's hits and those of no project (default DIR: here).")
@client_command
@pass_client_and_settings
def search(client: Client, loaded: LoadedSettings, query: tuple[str, ...], **options: Any) -> None:
    """Search memory: hybrid vector + keyword search.

    Time words in the query ("last week", "in March 2023", "the first time") favour hits
    from that time, relative to the latest date in the searched sources.
    """
    # The options are `search_and_show`'s keyword parameters, which the fast path fills too.
    search_and_show(client, request_settings(loaded), query, **options)


@click.command()
@click.argument("text", nargs=-1, required=True)
@click.option(
    "--type",
    "memory_type",
    type=click.Choice(MEMORY_TYPES),
    default="semantic",
    show_default=True,
    help="Memory type.",
)
@click.option("--tag", "tags", multiple=True, help="A tag; repeat for more.")
@click.option("--importance", type=click.FloatRange(0, 1), default=0.5, show_default=True)
@click.option("--when", "event_time", help="When it happened (ISO 8601); default now.")
@project_option("Belong to this project (default DIR: here): shown only there.")
@click.option("--global", "is_global", is_flag=True, help="Belong to no project (the default).")
@client_command
@pass_client
def remember(
    client: Client,
    text: tuple[str, ...],
    memory_type: str,
    tags: tuple[str, ...],
    importance: float,
    event_time: str | None,
    project: str | None,
    is_global: bool,
    as_json: bool,
) -> None:
    """Store a memory written directly, for every project (--global) or one (--project)."""
    if project and is_global:
        raise click.UsageError("give --project or --global, not both")
    result = client.remember(
        " ".join(text),
        memory_type=memory_type,
        tags=tags,
        importance=importance,
        event_time=event_time,
        project=project_of(project) if project else None,
    )
    emit(
        result,
        as_json,
        lambda out: out.print(f"Remembered as chunk {result['id']} ({result['source']})."),
    )


@click.command()
@click.argument("chunk_id", metavar="ID", type=int)
@client_command
@pass_client
def get(client: Client, chunk_id: int, as_json: bool) -> None:
    """Show one chunk by id."""
    chunk = client.get(chunk_id)

    def render(out: Console) -> None:
        out.print(
            f"[bold]chunk {chunk['id']}[/bold]  {chunk['kind']}/{chunk['granularity']}"
            f"  {chunk['source']}  {when(chunk.get('event_time'))}",
            markup=True,
        )
        if chunk.get("tags"):
            out.print("tags: " + ", ".join(chunk["tags"]))
        out.print()
        out.print(chunk["text"], markup=False)

    emit(chunk, as_json, render)


@click.command()
@click.argument("source", required=False)
@click.option("--id", "chunk_id", type=int, help="Forget the document holding this chunk.")
@click.option("--query", "-q", help="Forget what this search finds (memories unless --kind).")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(KINDS), help="With --query.")
@click.option("--limit", "-n", type=click.IntRange(1, 100), help="With --query: at most N hits.")
@click.option("--yes", "-y", is_flag=True, help="With --query: do not ask for confirmation.")
@click.option("--list-ignored", is_flag=True, help="Show the paths `forget PATH` keeps out.")
@client_command
@pass_client
def forget(
    client: Client,
    source: str | None,
    chunk_id: int | None,
    query: str | None,
    kinds: tuple[str, ...],
    limit: int | None,
    yes: bool,
    list_ignored: bool,
    as_json: bool,
) -> None:
    """Remove a document or memory by SOURCE (a path or memory:…), by --id, or by --query.

    A SOURCE that is a path (a file, a folder, or a glob such as '~/big/**/*.log') removes
    everything stored under it and keeps it out: touching or rescanning it does not bring it
    back. --list-ignored shows what is kept out; `recalld unforget PATH` lets it in again.

    --query shows what it would remove and asks first (--yes skips the question).
    """
    if list_ignored:
        entries = client.ignored()
        emit(
            {"ignored": entries},
            as_json,
            lambda out: table(
                out, ["forgotten path", "since"], [(e["pattern"], when(e["at"])) for e in entries]
            ),
        )
        return
    if sum(x is not None for x in (source, chunk_id, query)) != 1:
        raise click.UsageError("pass a SOURCE, --id ID or --query TEXT (one of them)")
    if source is not None and _is_path(source):
        gone = client.forget_path(source)
        emit(
            gone,
            as_json,
            lambda out: out.print(
                f"Forgot {gone['forgotten']} document(s); {gone['pattern']} is kept out "
                f"(`recalld unforget {gone['pattern']}` lets it in again).",
                markup=False,
            ),
        )
        return
    if query is None:
        result = client.forget(source, chunk_id=chunk_id)
        emit(result, as_json, lambda out: out.print(f"Forgot {result['source']}."))
        return
    plan = client.forget_query(query, limit=limit, filters={"kinds": list(kinds)})
    if not plan["matches"]:
        emit({**plan, "forgotten": []}, as_json, lambda out: out.print("Nothing matches."))
        return
    if not as_json or not yes:
        rows = [
            (m["id"], f"{m['kind']}/{m['granularity']}", m["source"], snippet(m["text"]))
            for m in plan["matches"]
        ]
        from recalld.cli.output import console

        out = console(stderr=as_json)
        table(out, ["id", "kind", "source", "text"], rows, title="would forget")
    sources = plan["sources"]
    if not yes and not click.confirm(f"Forget these {len(sources)} source(s)?", err=True):
        raise click.exceptions.Abort
    result = client.forget_confirm(plan["token"])
    emit(
        {**plan, **result},
        as_json,
        lambda out: out.print(f"Forgot {len(result['forgotten'])} source(s)."),
    )


def _is_path(source: str) -> bool:
    """Whether `forget SOURCE` names a path (kept out from now on) rather than a source id
    such as memory:…."""
    if source.startswith("memory:"):
        return False
    return (
        os.path.exists(source)
        or source.startswith((os.sep, "~", "."))
        or any(ch in source for ch in "*?[")
    )

"""Commands that bring content in: `ingest` (now, with a progress bar) and `sources`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from recalld.cli.common import client_command, pass_client
from recalld.cli.output import console, emit, table
from recalld.client import Client

if TYPE_CHECKING:
    from rich.console import Console

SOURCE_KINDS = ("auto", "documents", "code", "conversations")


def _summary(report: dict[str, Any]) -> str:
    return (
        f"{report['files']} files: {report['ingested']} ingested, "
        f"{report['unchanged']} unchanged, {report['empty']} empty, "
        f"{report['failed']} failed; {report['chunks']} chunks "
        f"({report['embedded']} embedded)"
    )


@click.command()
@click.argument("path", type=click.Path(exists=True))
@client_command
@pass_client
def ingest(client: Client, path: str, as_json: bool) -> None:
    """Ingest a file or a folder now (watched or not)."""
    if as_json or not sys.stderr.isatty():
        report = client.ingest(path)
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        with Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=console(stderr=True),
            transient=True,
        ) as bar:
            task = bar.add_task("ingesting", total=None)

            def on_progress(params: dict[str, Any]) -> None:
                bar.update(task, completed=params.get("done", 0), total=params.get("total"))

            report = client.ingest(path, on_progress=on_progress)

    def render(out: Console) -> None:
        out.print(_summary(report))
        for error in report.get("errors", []):
            out.print(f"  {error['path']}: {error['type']}: {error['message']}", markup=False)

    emit(report, as_json, render)
    if report.get("failed"):
        sys.exit(1)


@click.group()
def sources() -> None:
    """The folders recalld watches."""


@sources.command("list")
@client_command
@pass_client
def sources_list(client: Client, as_json: bool) -> None:
    """List watched folders."""
    found = client.sources_list()
    emit(
        found,
        as_json,
        lambda out: table(
            out,
            ["path", "kind", "origin", "exists"],
            [(s["path"], s["kind"], s["origin"], "yes" if s["exists"] else "NO") for s in found],
        ),
    )


@sources.command("add")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--kind",
    type=click.Choice(SOURCE_KINDS),
    default="auto",
    show_default=True,
    help="conversations: only JSON/JSONL logs; others: every supported file.",
)
@client_command
@pass_client
def sources_add(client: Client, folder: str, kind: str, as_json: bool) -> None:
    """Watch FOLDER from now on (it is scanned at once)."""
    added = client.sources_add(folder, kind=kind)
    emit(added, as_json, lambda out: out.print(f"Watching {added['path']} ({added['kind']})."))


@sources.command("remove")
@click.argument("folder", type=click.Path())
@click.option(
    "--forget", "forget_documents", is_flag=True, help="Also forget every document stored from it."
)
@client_command
@pass_client
def sources_remove(client: Client, folder: str, forget_documents: bool, as_json: bool) -> None:
    """Stop watching FOLDER (its documents stay unless --forget)."""
    removed = client.sources_remove(folder, forget=forget_documents)
    emit(
        removed,
        as_json,
        lambda out: out.print(
            f"Stopped watching {removed['path']}; forgot {removed['forgotten']} documents."
        ),
    )

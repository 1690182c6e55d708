"""Commands that bring content in: `ingest` (now, as a followed job) and `sources`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from recalld.cli.common import client_command, pass_client
from recalld.cli.jobs import follow, job_line
from recalld.cli.output import emit, table
from recalld.client import Client

if TYPE_CHECKING:
    from rich.console import Console

SOURCE_KINDS = ("auto", "documents", "code", "conversations")


def _summary(report: dict[str, Any]) -> str:
    refused = f", {report['refused']} refused" if report.get("refused") else ""
    skipped = ""
    if report.get("skipped"):
        skipped = f", {report['skipped']} skipped ({_types(report.get('skipped_types', {}))})"
    return (
        f"{report['files']} files: {report['ingested']} ingested, "
        f"{report['unchanged']} unchanged, {report['empty']} empty, "
        f"{report['failed']} failed{refused}{skipped}; {report['chunks']} chunks "
        f"({report['embedded']} embedded)"
        + (
            f", {report['unreadable']} unreadable chunks left out"
            if report.get("unreadable")
            else ""
        )
    )


def _types(counts: dict[str, int]) -> str:
    """`{".gz": 3, ".so": 1}` as `.gz 3, .so 1`, the commonest first."""
    return ", ".join(f"{t} {n}" for t, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])))


_EXCLUDE_HELP = "Leave out files matching this gitignore-style pattern (repeatable)."


@click.command()
@click.argument("path", type=click.Path(exists=True))
@click.option("--exclude", multiple=True, metavar="PATTERN", help=_EXCLUDE_HELP)
@click.option(
    "--allow-secrets",
    is_flag=True,
    help="Let in secret-bearing files (.env, private keys, ...) and store text unredacted.",
)
@click.option("--detach", is_flag=True, help="Start the job and return; `recalld jobs` follows it.")
@client_command
@pass_client
def ingest(
    client: Client,
    path: str,
    exclude: tuple[str, ...],
    allow_secrets: bool,
    detach: bool,
    as_json: bool,
) -> None:
    """Ingest a file or a folder now (watched or not).

    A folder's .gitignore, .ignore and .recalldignore files are honoured; a file named here
    is ingested even if they ignore it. Secret-bearing files are never ingested and keys and
    tokens in text are redacted, unless --allow-secrets.

    The daemon runs it as a job and this command follows it (files and chunks done, rate,
    ETA, current file); the job goes on whatever happens to this command. Ctrl-C asks whether
    to cancel it or leave it running. Files of a type recalld does not read are skipped, not
    failed. Exits 1 if any file failed or was refused, 130 on Ctrl-C."""
    job = client.start_ingest(path, exclude=exclude, allow_secrets=allow_secrets)
    if detach:
        emit(
            job,
            as_json,
            lambda out: out.print(
                f"Started ingest job {job['id']}: follow it with `recalld jobs get {job['id']} "
                f"--follow`, stop it with `recalld jobs cancel {job['id']}`.",
                markup=False,
            ),
        )
        return
    job = follow(client, job, as_json)
    if job["state"] != "done":
        emit(job, as_json, lambda out: out.print(job_line(job), markup=False))
        sys.exit(1)
    report = job["result"]

    def render(out: Console) -> None:
        out.print(_summary(report) + f" in {job['elapsed_s']} s", markup=False)
        for error in report.get("errors", []):
            out.print(f"  {error['path']}: {error['type']}: {error['message']}", markup=False)

    emit({**report, "job": job["id"]}, as_json, render)
    if report.get("failed") or report.get("refused"):
        sys.exit(1)


@click.group()
def sources() -> None:
    """The folders recalld watches."""


@sources.command("list")
@client_command
@pass_client
def sources_list(client: Client, as_json: bool) -> None:
    """List watched folders with their documents, chunks, errors and last scan."""
    from recalld.cli.browse import source_rows

    found = client.sources_list()
    emit(found, as_json, lambda out: table(out, *source_rows(found)))


@sources.command("add")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--kind",
    type=click.Choice(SOURCE_KINDS),
    default="auto",
    show_default=True,
    help="conversations: only JSON/JSONL logs; others: every supported file.",
)
@click.option("--exclude", multiple=True, metavar="PATTERN", help=_EXCLUDE_HELP)
@client_command
@pass_client
def sources_add(
    client: Client, folder: str, kind: str, exclude: tuple[str, ...], as_json: bool
) -> None:
    """Watch FOLDER from now on (it is scanned at once).

    Its .gitignore, .ignore and .recalldignore files (in every subfolder) are honoured, and
    secret-bearing files (.env, private keys, credential files, ...) never enter.
    """
    added = client.sources_add(folder, kind=kind, exclude=exclude)
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

"""`recalld migrate`: move a SQLite store into PostgreSQL (see `storage.migrate`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from recalld.cli.common import json_option
from recalld.cli.output import emit, pairs

if TYPE_CHECKING:
    from rich.console import Console


@click.command()
@click.option(
    "--from",
    "source",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The SQLite store file.",
)
@click.option("--to", "url", required=True, help="An empty PostgreSQL database: postgresql://…")
@click.option(
    "--isolate-users", is_flag=True, help="Create the store with per-role row-level security."
)
@click.option(
    "--vector-index",
    type=click.Choice(["hnsw", "exact"]),
    default="hnsw",
    show_default=True,
    help="pgvector HNSW index, or exact scans.",
)
@json_option
def migrate(source: Path, url: str, isolate_users: bool, vector_index: str, as_json: bool) -> None:
    """Copy a SQLite store into an empty PostgreSQL database, vectors included, and verify
    that every table has the same number of rows on both sides. Stop the daemon first."""
    # Imported only here: the store layer pulls numpy, sqlite-vec and psycopg.
    import asyncio

    from recalld.storage.migrate import migrate as run

    def progress(table: str, count: int) -> None:
        if not as_json:
            click.echo(f"\r{table}: {count:,}   ", nl=False, err=True)

    report = asyncio.run(
        run(
            source.expanduser(),
            url,
            isolate_users=isolate_users,
            vector_index=vector_index,
            progress=progress,
        )
    )
    if not as_json:
        click.echo("", err=True)

    def render(out: Console) -> None:
        pairs(
            out,
            [
                ("from", report["from"]),
                ("to", report["to"]),
                ("model", f"{report['model']} ({report['dimension']} dims)"),
                *((table, f"{n:,} rows, verified") for table, n in report["counts"].items()),
            ],
        )

    emit(report, as_json, render)

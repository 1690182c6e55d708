"""`export` and `import`: the store as JSONL, for backups, moving machines and switching models.

Both go through the daemon by default; with `--offline` they open the store file directly
(`export --offline` reads a snapshot and may run beside the daemon; `import --offline` needs
the daemon stopped and embeds with the configured model, the pattern of `check --offline`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from recalld import __version__
from recalld.cli.common import json_option, run_offline, settings_options
from recalld.cli.connection import connect, load
from recalld.cli.output import emit
from recalld.config import LoadedSettings

if TYPE_CHECKING:
    from rich.console import Console


@contextlib.contextmanager
def _output(target: str) -> Iterator[IO[str]]:
    """stdout for `-`; otherwise a temp file beside `target`, renamed over it on success, so
    a failed export never leaves a half file under the real name."""
    if target == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    path = Path(target).expanduser().resolve()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            yield handle
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _export_offline(loaded: LoadedSettings, write: Callable[[str], object], vectors: bool) -> Any:
    # Imported here: the store layer pulls numpy and sqlite-vec.
    from recalld.storage.registry import export_lines

    last, count = "", 0
    for line in export_lines(
        loaded.settings.store_location, vectors=vectors, recalld_version=__version__
    ):
        write(line + "\n")
        last, count = line, count + 1
    footer = json.loads(last)
    return {
        "lines": count,
        "counts": footer["counts"],
        "skipped_partial": footer["skipped_partial"],
        "skipped_unreadable": footer.get("skipped_unreadable", []),
    }


@click.command("export")
@click.argument("file", default="-", metavar="[FILE|-]")
@click.option("--vectors", is_flag=True, help="Include each chunk's vector (base64 float32).")
@click.option("--offline", is_flag=True, help="Read the store file directly, not via the daemon.")
@settings_options
@json_option
def export(
    file: str,
    vectors: bool,
    offline: bool,
    sets: tuple[str, ...],
    config_file: Path | None,
    as_json: bool,
) -> None:
    """Write the store as JSONL to FILE (default: stdout): documents, chunks, links and every
    other memory table; vectors only with --vectors."""
    with _output(file) as out:
        if offline:
            result = _export_offline(load(config_file, sets), out.write, vectors)
        else:
            with connect(config_file, sets) as client:
                result = client.export(out.write, vectors=vectors)
    counts = ", ".join(f"{n} {table}" for table, n in result["counts"].items())
    summary = f"exported {counts}" + (f" to {file}" if file != "-" else "")
    if as_json:
        # With the export on stdout, the summary must not mix into it.
        click.echo(json.dumps(result, indent=2), err=file == "-")
    else:
        click.echo(summary, err=file == "-")
    for row in result.get("skipped_unreadable", []):
        click.echo(
            f"skipped {row['table']} {row['id']} {row.get('source', '')}: {row['problem']} "
            "(`recalld check --repair` resets such values)",
            err=True,
        )


def _import_offline(
    loaded: LoadedSettings, path: Path, replace: bool, allow_secrets: bool
) -> dict[str, Any]:
    """Import with the daemon stopped: its lock, the configured model, our own loop."""
    # Imported only here: the store, the model and the ingest pipeline are heavy.
    from recalld.storage.importer import import_file

    return run_offline(
        loaded.settings,
        lambda memory: import_file(
            memory.store,
            path,
            memory.ingestor.embed,
            replace=replace,
            redact=None if allow_secrets else memory.ingestor.import_redaction(),
        ),
        "`recalld import` without --offline",
    )


def _render_import(report: dict[str, Any]) -> Callable[[Console], None]:
    def render(out: Console) -> None:
        docs = report["documents"]
        out.print(
            f"{docs['imported']} documents imported, {docs['unchanged']} unchanged, "
            f"{docs['replaced']} replaced; {report['chunks']} chunks "
            f"({report['vectors_reused']} vectors reused, {report['embedded']} embedded)",
            markup=False,
        )
        if docs["conflicts"]:
            out.print(
                f"{docs['conflicts']} documents kept: stored content differs "
                "(--replace overwrites it)",
                markup=False,
            )
        for table, n in report["rows"].items():
            skipped = report["skipped_rows"].get(table, 0)
            out.print(f"{table}: {n} added" + (f", {skipped} skipped" if skipped else ""))
        if redacted := report.get("redacted"):
            shown = ", ".join(f"{n} {table}" for table, n in sorted(redacted.items()))
            out.print(f"secrets redacted in {shown} (--allow-secrets keeps them)", markup=False)
        for source in report["conflicts"]:
            out.print(f"  kept: {source}", markup=False)

    return render


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--replace", is_flag=True, help="Overwrite stored documents whose content differs.")
@click.option("--offline", is_flag=True, help="Write the store file directly (daemon stopped).")
@click.option(
    "--allow-secrets",
    is_flag=True,
    help="Store the file's texts as they are, keys and tokens included (not redacted).",
)
@settings_options
@json_option
def import_(
    file: Path,
    replace: bool,
    offline: bool,
    allow_secrets: bool,
    sets: tuple[str, ...],
    config_file: Path | None,
    as_json: bool,
) -> None:
    """Restore an export into the store: ids remapped, nothing duplicated when run twice;
    vectors reused when the model matches, re-embedded otherwise. Keys, tokens and passwords
    in its texts are redacted as ingest redacts them (privacy.redact), unless --allow-secrets."""
    path = file.expanduser().resolve()
    if offline:
        report = _import_offline(load(config_file, sets), path, replace, allow_secrets)
    else:
        with connect(config_file, sets) as client:
            report = client.import_file(path, replace=replace, allow_secrets=allow_secrets)
    emit(report, as_json, _render_import(report))

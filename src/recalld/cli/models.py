"""Commands for the embedding model: `models` (what one can choose) and `reindex` (switch)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from recalld.cli.common import client_command, json_option, pass_client
from recalld.cli.connection import connect, load
from recalld.cli.output import console, emit, table, when
from recalld.client import Client
from recalld.errors import DaemonNotRunning
from recalld.storage import records

if TYPE_CHECKING:
    from rich.console import Console


def _offline_models(config_file: Path | None, sets: tuple[str, ...]) -> dict[str, Any]:
    """The model list without a daemon: the settings, and the store file's `meta`."""
    # Imported only here: the store layer pulls numpy and sqlite-vec.
    from recalld.embeddings import catalog, tuned
    from recalld.storage.registry import stored_meta

    settings = load(config_file, sets).settings
    meta = stored_meta(settings.store_location) or {}
    state = records.state_from_meta(meta)
    target = state.as_dict() if state else None
    spec = meta.get(records.SPEC_KEY)
    dimension = int(meta["dimension"]) if "dimension" in meta else None
    extra = tuple(s for s in (spec, target and target["spec"]) if s)
    return {
        "models": catalog.annotate(
            catalog.available(settings.embed, extra, tuned.list_tuned(settings.tuned_model_dir)),
            meta.get("model_id"),
            dimension,
            spec,
            target,
            settings.embed.model,
        ),
        "store": {"model": meta.get("model_id"), "dimension": dimension, "spec": spec},
        "reindex": target,
        "offline": True,
    }


@click.command()
@click.option("--offline", is_flag=True, help="Read the config and store file; skip the daemon.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path))
@json_option
def models(offline: bool, sets: tuple[str, ...], config_file: Path | None, as_json: bool) -> None:
    """List the embedding models: packaged, test and configured endpoints, with their
    dimension, the one the store uses and a reindex target. Works without the daemon."""
    found: dict[str, Any] | None = None
    if not offline:
        try:
            with connect(config_file, sets) as client:
                found = client.models()
        except DaemonNotRunning:
            found = None
    if found is None:
        found = _offline_models(config_file, sets)

    def render(out: Console) -> None:
        def mark(m: dict[str, Any]) -> str:
            flags = [
                name
                for name, on in (
                    ("store", m["in_use"]),
                    ("reindex target", m["reindex_target"]),
                    ("configured", m["configured"]),
                )
                if on
            ]
            return ", ".join(flags)

        table(
            out,
            ["spec", "model id", "dims", "kind", "use", "description"],
            [
                (
                    m["spec"],
                    m["model_id"] or "(asked on first use)",
                    m["dimension"] if m["dimension"] is not None else "?",
                    m["kind"],
                    mark(m),
                    m["description"],
                )
                for m in found["models"]
            ],
        )
        store = found["store"]
        if store["model"]:
            out.print(f"store: {store['model']} ({store['dimension']} dims)", markup=False)
        if found["reindex"]:
            r = found["reindex"]
            out.print(f"reindex in progress to {r['spec']} ({r['model']})", markup=False)

    emit(found, as_json, render)


def _line(info: dict[str, Any]) -> str:
    done, total = info.get("done", 0), info.get("total", 0)
    return (
        f"reindex to {info['spec']} ({info['model']}, {info['dimension']} dims): "
        f"{info.get('state', '?')}, {done}/{total} chunks, {info.get('rate', 0)} chunks/s, "
        f"started {when(info.get('started_at'))}"
    )


@click.command()
@click.option("--model", "spec", metavar="SPEC", help="The new model, as embed.model names it.")
@click.option("--detach", is_flag=True, help="Start it and return; `recalld status` follows it.")
@click.option("--cancel", is_flag=True, help="Stop the reindex and drop the vectors it made.")
@client_command
@pass_client
def reindex(client: Client, spec: str | None, detach: bool, cancel: bool, as_json: bool) -> None:
    """Re-embed the store with another model while recalld keeps answering with the old one.

    The switch is atomic and happens when every chunk has its new vector; a daemon stopped
    half-way resumes. Without --model, follow the reindex that is running (Ctrl-C stops
    following, not the reindex). See `recalld models`. Afterwards, set embed.model to SPEC if
    your config names a model."""
    if cancel:
        if spec or detach:
            raise click.UsageError("--cancel takes no --model or --detach")
        cancelled = client.reindex_cancel()
        emit(
            cancelled,
            as_json,
            lambda out: out.print(
                f"Cancelled the reindex to {cancelled['spec']}; dropped "
                f"{cancelled['dropped']} new vectors.",
                markup=False,
            ),
        )
        return
    if as_json or detach or not sys.stderr.isatty():
        answer = client.reindex(spec, detach=detach)
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        with Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]} chunks/s"),
            console=console(stderr=True),
            transient=True,
        ) as bar:
            task = bar.add_task("re-embedding", total=None, rate=0)

            def on_progress(params: dict[str, Any]) -> None:
                bar.update(
                    task,
                    completed=params.get("done", 0),
                    total=params.get("total"),
                    rate=params.get("rate", 0),
                    description=params.get("state", "re-embedding"),
                )

            answer = client.reindex(spec, on_progress=on_progress)

    def render(out: Console) -> None:
        if answer["detached"]:
            out.print(_line(answer["reindex"]), markup=False)
            out.print("Follow it with `recalld status` or `recalld reindex`.", markup=False)
            return
        done = answer["result"]
        out.print(
            f"Switched to {done['model']} ({done['dimension']} dims): {done['chunks']} chunks, "
            f"{done['embedded']} embedded in {done['elapsed_s']} s ({done['rate']} chunks/s).",
            markup=False,
        )
        out.print(
            f"If your config names a model, set embed.model = {done['spec']!r} there.",
            markup=False,
        )

    emit(answer, as_json, render)

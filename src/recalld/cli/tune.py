"""`recalld tune`: refine the local embedding model on the store's own content."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from recalld.cli.common import client_command, pass_client
from recalld.cli.output import console, emit
from recalld.client import Client

if TYPE_CHECKING:
    from rich.console import Console


@click.command()
@click.option("--dry-run", is_flag=True, help="Mine and report the triples and the expected time.")
@click.option("--max-steps", type=click.IntRange(min=0), help="Training steps (default 200).")
@click.option(
    "--max-seconds", type=click.FloatRange(min=0), help="Training time budget (default 900)."
)
@click.option("--switch", is_flag=True, help="Start the reindex onto the model if it is accepted.")
@client_command
@pass_client
def tune(
    client: Client,
    dry_run: bool,
    max_steps: int | None,
    max_seconds: float | None,
    switch: bool,
    as_json: bool,
) -> None:
    """Fine-tune the local model on this store's own content, with no labels (needs
    `pip install 'recalld[tune]'`).

    Sentences, titles and conversation turns held out of their chunks are searched by both
    routes; where BM25 finds the chunk and the vector route misses it, (query, chunk, the
    vector route's wrong hit) is a training triple (MultipleNegativesRankingLoss, CPU, two
    threads). A held-back share of those pseudo-queries decides: a model that does not beat
    the current one is refused. An accepted one is listed by `recalld models` as
    local:tuned-DATE; `recalld reindex --model local:tuned-DATE` (or --switch) puts it live.
    Interrupted, the next run resumes from the last checkpoint."""
    kwargs: dict[str, Any] = {
        "dry_run": dry_run,
        "switch": switch,
        "max_steps": max_steps,
        "max_seconds": max_seconds,
    }
    if as_json or not sys.stderr.isatty():
        answer = client.tune(**kwargs)
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        with Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            console=console(stderr=True),
            transient=True,
        ) as bar:
            task = bar.add_task("mining", total=None, info="")

            def on_progress(note: dict[str, Any]) -> None:
                phase = note.get("phase", "")
                if phase == "training":
                    bar.update(
                        task,
                        description="training",
                        completed=note["step"],
                        total=note["max_steps"],
                        info=f"loss {note['loss']}, {note['seconds']} s",
                    )
                elif phase == "mining":
                    bar.update(
                        task, description="mining", completed=note["done"], total=note["total"]
                    )
                else:
                    bar.update(task, description=phase, info="")

            answer = client.tune(**kwargs, on_progress=on_progress)

    def render(out: Console) -> None:
        mined = answer["mining"]
        out.print(
            f"{mined['pseudo_queries']} pseudo-queries: {mined['triples']} triples where the "
            f"vector route missed ({mined['vector_missed']}) or ranked lower "
            f"({mined['vector_lower']}) what BM25 found; {mined['eval_queries']} held back.",
            markup=False,
        )
        if answer.get("dry_run"):
            out.print(f"Training would take about {answer['estimate_seconds']} s.", markup=False)
            return
        t, gate = answer["training"], answer["gate"]
        out.print(
            f"Trained {t['steps']} steps ({t['resumed_from']} resumed) in "
            f"{round(t['seconds'], 1)} s; loss {t['first_loss']} -> {t['last_loss']}.",
            markup=False,
        )
        out.print(
            f"Held-out vector Recall@10 {gate['recall_before']} -> {gate['recall_after']}, "
            f"MRR@10 {gate['mrr_before']} -> {gate['mrr_after']}: "
            + ("accepted" if gate["accepted"] else f"refused, {gate['reason']}"),
            markup=False,
        )
        if answer.get("model"):
            if answer.get("reindex"):
                out.print(
                    f"Reindexing onto {answer['model']}; follow it with `recalld reindex`.",
                    markup=False,
                )
            else:
                out.print(
                    f"Put it live with `recalld reindex --model {answer['model']}`.", markup=False
                )

    emit(answer, as_json, render)

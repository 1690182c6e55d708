"""`recalld jobs` (list, get, cancel) and following a job: the progress bar, and what Ctrl-C
does (ask to cancel or leave the job running, then exit 130)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from recalld.cli.common import client_command, pass_client
from recalld.cli.output import console, duration, emit, table, when
from recalld.client import Client

if TYPE_CHECKING:
    from rich.console import Console

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command stopped by Ctrl-C


def figures(job: dict[str, Any]) -> str:
    """A job's progress in one line: files, chunks, rate, ETA, current file."""
    total = job["total"] if job["total"] is not None else "?"
    parts = [
        f"{job['done']}/{total} files",
        f"{job['chunks']} chunks",
        f"{job['rate']} files/s",
    ]
    if job.get("failed"):
        parts.append(f"{job['failed']} failed")
    if job.get("eta_s") is not None:
        parts.append(f"ETA {duration(job['eta_s'])}")
    if job.get("current") and job["state"] == "running":
        parts.append(f"now {job['current']}")
    return ", ".join(parts)


def job_line(job: dict[str, Any]) -> str:
    """`<id> ingest <path>: <state>, <figures>`."""
    line = f"{job['id']} {job['kind']} {job['path']}: {job['state']}, {figures(job)}"
    if job.get("error") and job["error"]["message"] != job["state"]:
        line += f" ({job['error']['message']})"
    return line


def follow(client: Client, job: dict[str, Any], quiet: bool) -> dict[str, Any]:
    """Follow `job` to its end, with a progress bar on a terminal unless `quiet`.

    Ctrl-C asks whether to cancel the job or leave it running, then exits 130.
    """
    try:
        if quiet or not sys.stderr.isatty():
            return client.wait_job(job["id"])
        return _follow_with_bar(client, job)
    except KeyboardInterrupt:
        interrupted(client, job["id"])
        raise AssertionError("unreachable") from None


def _follow_with_bar(client: Client, job: dict[str, Any]) -> dict[str, Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("files, {task.fields[chunks]} chunks, {task.fields[rate]} files/s"),
        TextColumn("{task.fields[eta]}"),
        TextColumn("{task.fields[current]}", markup=False),
        console=console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(f"job {job['id']}", total=None, chunks=0, rate=0, eta="", current="")

        def on_progress(params: dict[str, Any]) -> None:
            eta = params.get("eta_s")
            current = params.get("current") or ""
            bar.update(
                task,
                completed=params.get("done", 0),
                total=params.get("total"),
                chunks=params.get("chunks", 0),
                rate=params.get("rate", 0),
                eta=f"ETA {duration(eta)}" if eta is not None else "",
                current=current if len(current) <= 60 else "…" + current[-59:],
            )

        return client.wait_job(job["id"], on_progress=on_progress)


def interrupted(client: Client, job_id: str) -> None:
    """After Ctrl-C: on a terminal, ask whether to cancel the job; either way say what
    happened and exit 130. Without a terminal to ask on, the job is left running."""
    cancel = False
    if sys.stdin.isatty():
        try:
            cancel = click.confirm(
                f"\nCancel ingest job {job_id}? (no: it goes on in the daemon)",
                default=False,
                err=True,
            )
        except click.Abort:
            cancel = False  # a second Ctrl-C: leave it
    if cancel:
        job = client.cancel_job(job_id)
        click.echo(f"Cancelled job {job_id}: {figures(job)}.", err=True)
    else:
        click.echo(
            f"\nJob {job_id} goes on in the daemon: follow it with `recalld jobs get {job_id} "
            f"--follow`, stop it with `recalld jobs cancel {job_id}`.",
            err=True,
        )
    sys.exit(EXIT_INTERRUPTED)


@click.group(invoke_without_command=True)
@click.pass_context
def jobs(ctx: click.Context) -> None:
    """Long work the daemon runs (ingests): list, follow or cancel it from any terminal.

    Without a subcommand, the same as `recalld jobs list`."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(jobs_list)


@jobs.command("list")
@client_command
@pass_client
def jobs_list(client: Client, as_json: bool) -> None:
    """Every job: queued, running, done, failed and cancelled (since the daemon started)."""
    found = client.jobs()

    def render(out: Console) -> None:
        if not found:
            out.print("No jobs.")
            return
        table(
            out,
            ["id", "kind", "state", "progress", "started", "path"],
            [
                (j["id"], j["kind"], j["state"], figures(j), when(j["started_at"]), j["path"])
                for j in found
            ],
        )

    emit(found, as_json, render)


@jobs.command("get")
@click.argument("job_id", metavar="ID")
@click.option("--follow", "follow_job", is_flag=True, help="Follow it to its end.")
@client_command
@pass_client
def jobs_get(client: Client, job_id: str, follow_job: bool, as_json: bool) -> None:
    """One job's state and figures (files and chunks done, rate, ETA, current file)."""
    job = client.job(job_id)
    if follow_job:
        job = follow(client, job, as_json)
    emit(job, as_json, lambda out: out.print(job_line(job), markup=False))


@jobs.command("cancel")
@click.argument("job_id", metavar="ID")
@client_command
@pass_client
def jobs_cancel(client: Client, job_id: str, as_json: bool) -> None:
    """Stop a queued or running job (files already done stay ingested)."""
    job = client.cancel_job(job_id)
    emit(job, as_json, lambda out: out.print(job_line(job), markup=False))

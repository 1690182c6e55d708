"""Commands for looking after the daemon and the store: `status`, `stop`, `errors`, `check`,
`config`."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from recalld.cli.common import client_command, json_option, pass_client, run_offline
from recalld.cli.connection import connect, load
from recalld.cli.jobs import job_line
from recalld.cli.output import duration, emit, pairs, snippet, table, when
from recalld.client import Client
from recalld.config import LoadedSettings, setting_scope, settings_as_dict
from recalld.errors import DaemonError, DaemonNotRunning, StoreError
from recalld.places import default_config_path

if TYPE_CHECKING:
    from rich.console import Console


def _reindex_row(info: dict[str, Any] | None) -> list[tuple[str, Any]]:
    if not info:
        return []
    return [
        (
            "reindex",
            f"to {info['model']} ({info['dimension']} dims), {info['state']}: "
            f"{info['done']}/{info['total']} chunks, {info['rate']} chunks/s, "
            f"started {when(info['started_at'])}",
        )
    ]


@click.command()
@click.option(
    "--timeout",
    type=click.FloatRange(0),
    default=60.0,
    show_default=True,
    help="Seconds to wait for it to finish its requests and drain its queue.",
)
@client_command
@pass_client
def stop(client: Client, timeout: float, as_json: bool) -> None:
    """Stop the running daemon (SIGTERM: it finishes what is in flight, drains and closes the
    store). Exits 3 if none is running, 1 if it is still up after --timeout."""
    info = client.status()
    pid = int(info["pid"])
    os.kill(pid, signal.SIGTERM)
    client.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            client.status()
        except DaemonNotRunning:
            break
        except DaemonError:
            pass  # shutting down: it still answers, with an error
        client.close()
        time.sleep(0.2)
    else:
        raise click.ClickException(f"recalld (pid {pid}) is still running after {timeout:g} s")
    stopped = {"stopped": True, "pid": pid, "socket": info["socket"]}
    emit(stopped, as_json, lambda out: out.print(f"Stopped recalld (pid {pid}).", markup=False))


def _status_within(client: Client, seconds: float) -> dict[str, Any]:
    # A daemon starting up answers "not ready" (a DaemonError) until its store is open.
    deadline = time.monotonic() + seconds
    while True:
        try:
            return client.status()
        except DaemonError:
            client.close()
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def _job_rows(jobs: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    # Jobs under way, then the last one finished; `recalld jobs` lists them all.
    active = [j for j in jobs if j["state"] in ("queued", "running")]
    finished = [j for j in jobs if j["state"] not in ("queued", "running")]
    return [("job", job_line(j)) for j in active + finished[-1:]]


@click.command()
@click.option(
    "--wait",
    type=click.FloatRange(0),
    metavar="SECONDS",
    help="Wait up to SECONDS for the daemon to answer (e.g. right after starting it).",
)
@client_command
@pass_client
def status(client: Client, wait: float | None, as_json: bool) -> None:
    """Show the daemon's state: versions, model, counts, queues, jobs, uptime.

    Exits 3 when no daemon answers (after --wait SECONDS, if given)."""
    info = _status_within(client, wait or 0.0)

    def render(out: Console) -> None:
        counts, queues = info["counts"], info["queues"]
        pairs(
            out,
            [
                ("state", f"{info['state']} (pid {info['pid']}, up {duration(info['uptime_s'])})"),
                (
                    "version",
                    f"recalld {info['version']}, protocol {info['protocol_version']}, "
                    f"schema {info['schema_version']}"
                    + (f" ({info['backend']})" if info.get("backend") else ""),
                ),
                ("model", f"{info['model']} ({info['dimension']} dims)"),
                *_reindex_row(info.get("reindex")),
                ("store", info["store"]),
                ("socket", info["socket"]),
                ("drop folder", info["drop_folder"]),
                ("sources", info["sources"]),
                ("documents", counts["documents"]),
                ("chunks", counts["chunks"]),
                ("errors", info["errors"]),
                *_privacy_rows(info),
                ("fusion", fusion_line(info.get("calibration"), info.get("self_tune", False))),
                (
                    "answerability",
                    answerability_line(
                        info.get("calibration"), info.get("answerability_self_tune", False)
                    ),
                ),
                (
                    "pending",
                    f"{info['pending']} (events {queues['events']}, jobs {queues['jobs']}, "
                    f"scans {queues['scans']}, in flight {queues['in_flight']}"
                    + (
                        f", waiting for disk space {queues['no_space']}"
                        if queues.get("no_space")
                        else ""
                    )
                    + ")",
                ),
                *_writes_row(info.get("writes")),
                *_job_rows(info.get("jobs", [])),
            ],
        )

    emit(info, as_json, render)


def _writes_row(writes: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """A `writes` row only when the store refuses them (disk full, files changed)."""
    if not writes or writes.get("ok", True):
        return []
    return [("writes", f"REFUSED: {writes['message']}")]


def fusion_line(tuning: dict[str, Any] | None, self_tune: bool) -> str:
    """What fusion the store chose for itself, and whether searches use it."""
    use = "in use" if self_tune else "not in use (search.self_tune = false)"
    if not tuning:
        return "defaults (not calibrated: `recalld calibrate`)"
    chosen = ", ".join(f"{k} {v['family']}" for k, v in sorted(tuning["kinds"].items()))
    return (
        f"calibrated {when(tuning['at'])} at {tuning['chunks']} chunks in {tuning['seconds']} s: "
        f"{chosen or 'every kind kept the defaults'}; {use}"
    )


def answerability_line(tuning: dict[str, Any] | None, self_tune: bool | None) -> str:
    """The answerability thresholds the store learned, and whether searches use them (not
    said when `self_tune` is None)."""
    learned = (tuning or {}).get("answerability")
    if not learned:
        return "not learned (`recalld calibrate`)"
    scopes = []
    for scope, found in sorted(learned.items()):
        if found.get("skipped"):
            scopes.append(f"{scope}: nothing learned ({found['skipped']})")
        elif found.get("current") is False:
            scopes.append(
                f"{scope}: threshold {found['threshold']} learned for an earlier signal, "
                "not used until the store calibrates again (`recalld calibrate`)"
            )
        elif found["threshold"] <= 0:
            scopes.append(f"{scope}: off (no threshold separates its pseudo-questions)")
        else:
            scopes.append(
                f"{scope}: threshold {found['threshold']} at k = {found['k']} "
                f"({found['rejected']:.0%} of {found['queries']} unanswerable pseudo-questions "
                f"rejected, {found['false_rejection']:.0%} of answerable)"
            )
    use = {
        None: "",
        True: "; in use",
        False: "; not in use (search.answerability_self_tune = false)",
    }[self_tune]
    return "; ".join(scopes) + use


@click.command()
@client_command
@pass_client
def calibrate(client: Client, as_json: bool) -> None:
    """Let the store choose its fusion per content kind from its own content, now.

    Pseudo-queries are drawn from the store's chunks (a title or sentence whose sibling chunks
    should come back, a conversation turn whose reply should), every fusion family is scored
    on them, and the best per kind is recorded in the store. Searches use it with
    search.self_tune = true (the daemon then also recalibrates as the store changes).
    """
    tuning = client.calibrate()

    def render(out: Console) -> None:
        rows = [
            (
                kind,
                choice["family"],
                choice["queries"],
                choice["scores"][choice["family"]],
                choice["scores"].get(choice["prior"], ""),
            )
            for kind, choice in sorted(tuning["kinds"].items())
        ]
        table(out, ["kind", "chosen", "pseudo-queries", "MRR@10", "defaults' MRR@10"], rows)
        for kind, why in sorted(tuning["skipped"].items()):
            out.print(f"{kind}: defaults kept ({why})", markup=False)
        out.print(f"answerability: {answerability_line(tuning, None)}", markup=False)
        out.print(f"{tuning['chunks']} chunks, {tuning['seconds']} s", markup=False)

    emit(tuning, as_json, render)


def _privacy_rows(info: dict[str, Any]) -> list[tuple[str, Any]]:
    """Redacted chunks and skipped files, when there are any."""
    rows: list[tuple[str, Any]] = []
    if info.get("redacted_chunks"):
        rows.append(("redacted", f"{info['redacted_chunks']} chunks held secrets"))
    if skipped := info.get("skipped"):
        by_type = ", ".join(
            f"{t} {n}" for t, n in sorted(skipped.items(), key=lambda x: (-x[1], x[0]))
        )
        rows.append(("skipped", f"{sum(skipped.values())} unsupported files ({by_type})"))
    return rows


@click.command()
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@client_command
@pass_client
def errors(client: Client, limit: int, as_json: bool) -> None:
    """List recent ingest errors."""
    found = client.errors(limit=limit)

    def render(out: Console) -> None:
        if not found:
            out.print("No ingest errors.")
            return
        table(
            out,
            ["when", "source", "type", "message"],
            [(when(e["at"]), e["source"], e["type"], snippet(e["message"], 200)) for e in found],
        )

    emit(found, as_json, render)


def _render_check(report: dict[str, Any]) -> Any:
    def render(out: Console) -> None:
        repaired = report.get("repair")
        if repaired is not None:
            before = repaired["before"]
            out.print(
                "before repair: "
                + ("ok" if before["ok"] else "failed " + ", ".join(before["failed"])),
                markup=False,
            )
            if repaired["actions"]:
                table(
                    out,
                    ["repair", "count", "detail"],
                    [(a["name"], a["count"], a["detail"]) for a in repaired["actions"]],
                )
            for rebuilt in repaired.get("rebuilt", []):
                out.print(
                    f"rebuilt from what could be read of the damaged file, kept as "
                    f"{rebuilt['damaged_file']}: rows copied {rebuilt['rows']}, "
                    f"vectors {rebuilt['vectors']}, unreadable {rebuilt['unreadable'] or 'none'}",
                    markup=False,
                )
            for item in repaired["unrepaired"]:
                out.print(f"not repaired: {item['name']}: {item['detail']}", markup=False)
        table(
            out,
            ["check", "ok", "value", "detail"],
            [
                (c["name"], "ok" if c["ok"] else "FAIL", c["value"], c["detail"])
                for c in report["checks"]
            ],
            title=f"{report['path']}: {'ok' if report['ok'] else 'PROBLEMS FOUND'}",
        )

    return render


def _repair_offline(loaded: LoadedSettings) -> dict[str, Any]:
    """Repair the store with the daemon stopped: its lock, the configured model, our own loop."""
    # Imported only here: the store, the model and the ingest pipeline are heavy.
    from recalld.storage.repair import check_and_repair

    settings = loaded.settings
    if not settings.store_url and not settings.store_path.exists():
        raise StoreError(
            f"no store at {settings.store_path}; start `recalld serve` once to create it",
            data={"path": str(settings.store_path)},
        )

    return run_offline(
        settings,
        lambda memory: check_and_repair(
            memory.store, memory.ingestor.embed, memory.add_file, memory.forget
        ),
        "`recalld check --repair` without --offline",
        closed=None if settings.store_url else _rebuilding(settings.store_path),
    )


def _rebuilding(path: Path) -> Any:
    """Around an offline repair: a store SQLite finds damaged is rebuilt from what can be read
    first (`storage.sqlite.salvage`), and once more if the repair still finds it damaged. At most
    two rebuilds and three repairs: it always ends."""
    from recalld.errors import StoreError
    from recalld.storage.registry import check_store
    from recalld.storage.sqlite.salvage import is_damaged_report, salvage

    def run(repair: Any) -> dict[str, Any]:
        rebuilds: list[dict[str, Any]] = []
        if is_damaged_report(check_store(path)):
            rebuilds.append(salvage(path))
        for _ in range(2):
            try:
                report: dict[str, Any] = repair()
            except StoreError as exc:
                if exc.data.get("reason") != "damaged" or len(rebuilds) == 2:
                    raise
            else:
                if not is_damaged_report(report) or len(rebuilds) == 2:
                    break
            rebuilds.append(salvage(path))
        else:
            report = repair()
        report.setdefault("repair", {})["rebuilt"] = rebuilds
        return report

    return run


@click.command()
@click.option(
    "--offline", is_flag=True, help="Open the store file directly instead of asking the daemon."
)
@click.option(
    "--repair",
    is_flag=True,
    help="Restore what failed (rebuild FTS, re-embed, drop orphans, re-ingest partial files, "
    "reset unreadable values); user memories are kept. With --offline, a damaged file is "
    "rebuilt from what can be read first and kept beside the store.",
)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path))
@json_option
def check(
    offline: bool, repair: bool, sets: tuple[str, ...], config_file: Path | None, as_json: bool
) -> None:
    """Verify the store's invariants (vector/FTS/chunk parity, partial documents, model, FTS and
    SQLite integrity); with --repair, restore them first. Exits 1 when a check fails."""
    if offline and repair:
        report = _repair_offline(load(config_file, sets))
    elif offline:
        # The store layer is imported only here: it pulls numpy and sqlite-vec.
        from recalld.storage.registry import check_store

        report = check_store(load(config_file, sets).settings.store_location)
    else:
        with connect(config_file, sets) as client:
            report = client.check(repair=repair)
    emit(report, as_json, _render_check(report))
    if not report["ok"]:
        sys.exit(1)


@click.group()
def config() -> None:
    """Settings."""


@config.command("show")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path))
@json_option
def config_show(sets: tuple[str, ...], config_file: Path | None, as_json: bool) -> None:
    """Every effective setting, where it came from (default, file, env, flag) and who reads
    it: the daemon when it starts, every search this shell sends, or the client itself.

    Works without the daemon; it resolves settings as `recalld serve` would here."""
    loaded = load(config_file, sets)
    values = settings_as_dict(loaded.settings)
    data = {
        key: {
            "value": value,
            "source": loaded.sources.get(key, "default"),
            "applies": setting_scope(key),
        }
        for key, value in values.items()
    }
    file = config_file or default_config_path(os.environ)
    # A daemon-side setting given here (env, --set) is not what a running daemon uses.
    unapplied = [
        k for k, v in data.items() if v["applies"] == "daemon" and v["source"] in ("env", "flag")
    ]

    def render(out: Console) -> None:
        out.print(f"config file: {file}{'' if file.exists() else ' (not present)'}", markup=False)
        table(
            out,
            ["setting", "value", "source", "applies"],
            [(k, v["value"], v["source"], v["applies"]) for k, v in data.items()],
        )
        out.print(
            "applies: daemon = read by `recalld serve` when it starts (a running daemon keeps "
            "those it started with); request = sent with every search from here; client = "
            "read by this command itself; both = client and daemon.",
            markup=False,
        )
        if unapplied:
            out.print(
                f"Not in effect until a daemon starts with them: {', '.join(unapplied)}.",
                markup=False,
            )

    emit(data, as_json, render)

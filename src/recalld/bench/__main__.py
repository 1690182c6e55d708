"""`python -m recalld.bench`: the benchmark commands."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import click

from recalld.bench import common

RESULTS = Path("bench-results")


def _overrides(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"expected key=value, got {pair!r}")
        out[key] = value
    return out


def _emit(
    name: str,
    report: dict[str, Any],
    as_json: bool,
    results: Path,
    rows: list[list[str]],
    header: list[str],
) -> None:
    path = common.write_report(results, name, report)
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True))
        return
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    click.echo(f"report: {path}")


def _workdir(store_dir: Path | None) -> Path:
    if store_dir is not None:
        store_dir.mkdir(parents=True, exist_ok=True)
        return store_dir
    return Path(tempfile.mkdtemp(prefix="recalld-bench-"))


@click.group()
def main() -> None:
    """Benchmarks for recalld: quality on BEIR and LoCoMo, search at scale, ingest speed."""


@main.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--split", default="train", show_default=True)
@click.option(
    "--mode",
    "modes",
    multiple=True,
    type=click.Choice(list(common.MODES)),
    default=list(common.MODES),
    show_default=True,
)
@click.option("--limit-queries", type=int, default=None)
@click.option(
    "--store-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Keep the store here and reuse it on the next run (unchanged documents "
    "are skipped by hash).",
)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Any setting.")
@click.option("--results", type=click.Path(path_type=Path), default=RESULTS, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def beir(
    folder: Path,
    split: str,
    modes: tuple[str, ...],
    limit_queries: int | None,
    store_dir: Path | None,
    sets: tuple[str, ...],
    results: Path,
    as_json: bool,
) -> None:
    """NDCG@10, Recall@10/100, MRR@10 and latency on a BEIR folder, for every mode."""
    from recalld.bench import beir as beir_bench

    report = asyncio.run(
        beir_bench.run(
            folder, split, list(modes), limit_queries, _workdir(store_dir), _overrides(sets)
        )
    )
    header = ["mode", "ndcg@10", "recall@10", "recall@100", "mrr@10", "p50 ms", "p95 ms"]
    rows = [
        [
            m,
            r["ndcg@10"],
            r["recall@10"],
            r["recall@100"],
            r["mrr@10"],
            r["latency_ms_p50"],
            r["latency_ms_p95"],
        ]
        for m, r in report["modes"].items()
    ]
    _emit("beir", report, as_json, results, rows, header)


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--granularity",
    type=click.Choice(["session", "round", "fact", "all"]),
    default="all",
    show_default=True,
)
@click.option(
    "--mode",
    "modes",
    multiple=True,
    type=click.Choice(list(common.MODES)),
    default=list(common.MODES),
    show_default=True,
)
@click.option(
    "--store-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Keep each conversation's store here and reuse it on the next run.",
)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Any setting.")
@click.option("--results", type=click.Path(path_type=Path), default=RESULTS, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def locomo(
    file: Path,
    granularity: str,
    modes: tuple[str, ...],
    store_dir: Path | None,
    sets: tuple[str, ...],
    results: Path,
    as_json: bool,
) -> None:
    """Evidence Recall@1/5/10 and MRR per category on a LoCoMo file, for every mode."""
    from recalld.bench import locomo as locomo_bench

    report = asyncio.run(
        locomo_bench.run(file, granularity, list(modes), _overrides(sets), store_dir)
    )
    header = ["mode", "category", "recall@1", "recall@5", "recall@10", "mrr", "rejected"]
    rows = []
    for mode, summary in report["modes"].items():
        for category, figures in summary.items():
            if not isinstance(figures, dict):
                continue
            rows.append(
                [
                    mode,
                    category,
                    figures.get("recall@1", ""),
                    figures.get("recall@5", ""),
                    figures.get("recall@10", ""),
                    figures.get("mrr", ""),
                    figures.get("rejected", figures.get("false_rejection", "")),
                ]
            )
    _emit("locomo", report, as_json, results, rows, header)


if __name__ == "__main__":
    main()

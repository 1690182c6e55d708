"""`python -m bench`: the benchmark commands."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import click

from bench import common
from bench.options import (
    CALIBRATE_OPTION,
    CALIBRATION_SEED_OPTION,
    CORPUS_LIMIT_OPTION,
    MODE_OPTION,
    PLOT_OPTION,
    REPORT_OPTIONS,
    SPLIT_OPTION,
    VARIANT_OPTION,
    limit_queries_option,
    overrides,
    parse_sizes,
    parse_variants,
    store_dir_option,
    workdir_for,
)


def _emit(
    name: str,
    report: dict[str, Any],
    as_json: bool,
    results: Path,
    rows: list[list[str]],
    header: list[str],
    plot: bool = False,
) -> None:
    path = common.write_report(results, name, report)
    if plot:
        _plot({"benchmark": name, **report}, path.with_suffix(".png"))
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True))
        return
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    click.echo(f"report: {path}")


def _plot(report: dict[str, Any], out: Path) -> None:
    from bench import plot

    try:
        plot.plot_report(report, out)
    except plot.PlotUnavailableError as exc:
        click.echo(f"no plot: {exc}", err=True)
        return
    click.echo(f"plot: {out}", err=True)


def _significance_rows(report: dict[str, Any]) -> None:
    """Print each mode's difference from bm25 and vector with its randomization-test p."""
    for mode, against in report["significance"].items():
        for base, figures in against.items():
            parts = [f"{m} {f['delta']:+.4f} (p={f['p']})" for m, f in figures.items()]
            click.echo(f"{mode} {base}: " + ", ".join(parts))


@click.group()
def main() -> None:
    """Benchmarks for recalld: quality on BEIR and LoCoMo, search at scale, ingest speed."""


@main.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@SPLIT_OPTION
@MODE_OPTION
@limit_queries_option()
@store_dir_option(
    "Keep the store here and reuse it on the next run (unchanged documents are skipped by hash)."
)
@CORPUS_LIMIT_OPTION
@VARIANT_OPTION
@CALIBRATE_OPTION
@CALIBRATION_SEED_OPTION
@REPORT_OPTIONS
@PLOT_OPTION
def beir(
    folder: Path,
    split: str,
    modes: tuple[str, ...],
    limit_queries: int | None,
    store_dir: Path | None,
    specs: tuple[str, ...],
    calibrate: bool,
    calibration_seed: int,
    corpus_limit: int | None,
    sets: tuple[str, ...],
    results: Path,
    as_json: bool,
    plot: bool,
) -> None:
    """NDCG@10, Recall@10/100, MRR@10 and latency on a BEIR folder, for every mode.

    Each mode's per-query NDCG@10, Recall@10 and MRR@10 are compared with bm25's and vector's
    by a paired randomization test (10,000 sign flips); the p-values are in the report.
    """
    from bench import beir as beir_bench

    report = asyncio.run(
        beir_bench.run(
            folder,
            split,
            list(modes),
            limit_queries,
            workdir_for(store_dir),
            overrides(sets),
            parse_variants(specs),
            calibrate,
            corpus_limit,
            calibration_seed,
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
    _emit("beir", report, as_json, results, rows, header, plot)
    if not as_json:
        _significance_rows(report)


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--granularity",
    type=click.Choice(["session", "round", "window", "fact", "all"]),
    default="all",
    show_default=True,
)
@MODE_OPTION
@store_dir_option("Keep each conversation's store here and reuse it on the next run.")
@VARIANT_OPTION
@CALIBRATE_OPTION
@CALIBRATION_SEED_OPTION
@REPORT_OPTIONS
@PLOT_OPTION
def locomo(
    file: Path,
    granularity: str,
    modes: tuple[str, ...],
    store_dir: Path | None,
    specs: tuple[str, ...],
    calibrate: bool,
    calibration_seed: int,
    sets: tuple[str, ...],
    results: Path,
    as_json: bool,
    plot: bool,
) -> None:
    """Evidence Recall@1/5/10, MRR and recall at 150/300/600 returned words, per category.

    Recall within a budget of returned words compares units of different sizes fairly. Each
    mode's per-question figures are compared with bm25's and vector's by a paired
    randomization test (10,000 sign flips); the p-values are in the report.
    """
    from bench import locomo as locomo_bench

    report = asyncio.run(
        locomo_bench.run(
            file,
            granularity,
            list(modes),
            overrides(sets),
            store_dir,
            variants=parse_variants(specs),
            calibrate=calibrate,
            calibration_seed=calibration_seed,
        )
    )
    budgets = [f"words@{b}" for b in locomo_bench.WORD_BUDGETS]
    header = ["mode", "category", "recall@1", "recall@5", "recall@10", *budgets, "mrr", "rejected"]
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
                    *(figures.get(b, "") for b in budgets),
                    figures.get("mrr", ""),
                    figures.get("rejected", figures.get("false_rejection", "")),
                ]
            )
    _emit("locomo", report, as_json, results, rows, header, plot)
    if not as_json:
        _significance_rows(report)


def _variants(specs: tuple[str, ...], only: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The built-in variants (or those named by --only) plus `name:key=value,...` ones."""
    from bench.ablation import VARIANTS

    unknown = [n for n in only if n not in VARIANTS]
    if unknown:
        raise click.BadParameter(f"no built-in variant {unknown[0]!r}; see --help")
    out = {n: v for n, v in VARIANTS.items() if not only or n in only or n == "baseline"}
    out.update(parse_variants(specs))
    return out


@main.command()
@click.option(
    "--beir",
    "beir_folder",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A BEIR folder (train split), e.g. SciFact.",
)
@click.option(
    "--locomo",
    "locomo_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A LoCoMo JSON file.",
)
@click.option(
    "--variant",
    "specs",
    multiple=True,
    metavar="NAME:KEY=VALUE,...",
    help="Another variant: search settings, e.g. 'freq-x10:frequency_weight=0.5'.",
)
@click.option(
    "--only",
    multiple=True,
    help="Built-in variants to run (baseline always runs): recency, frequency, importance.",
)
@click.option(
    "--history",
    type=click.Choice(["split", "same", "none"]),
    default="split",
    show_default=True,
    help="Simulated use: odd queries as history and even ones measured (split), the measured "
    "queries replayed first (same), or none.",
)
@click.option(
    "--history-k", type=int, default=10, show_default=True, help="Hits counted per query."
)
@click.option(
    "--age-days",
    type=float,
    default=365.0,
    show_default=True,
    help="Back-date every chunk's creation this far before the history queries.",
)
@limit_queries_option("BEIR: only the first N queries.")
@store_dir_option("Keep the stores here (beir/, locomo/) and reuse them on the next run.")
@REPORT_OPTIONS
def ablation(
    beir_folder: Path | None,
    locomo_file: Path | None,
    specs: tuple[str, ...],
    only: tuple[str, ...],
    history: str,
    history_k: int,
    age_days: float,
    limit_queries: int | None,
    store_dir: Path | None,
    sets: tuple[str, ...],
    results: Path,
    as_json: bool,
) -> None:
    """Baseline against each re-rank factor alone: NDCG@10 on BEIR, Recall@5 on LoCoMo."""
    from bench import ablation as ablation_bench

    if beir_folder is None and locomo_file is None:
        raise click.UsageError("give --beir FOLDER, --locomo FILE or both")
    report = asyncio.run(
        ablation_bench.run(
            beir_folder,
            locomo_file,
            workdir_for(store_dir),
            overrides(sets),
            _variants(specs, only),
            history,
            history_k,
            age_days,
            limit_queries,
        )
    )
    header, rows = ablation_bench.table(report)
    _emit("ablation", report, as_json, results, rows, header)


@main.command()
@click.option(
    "--chunks",
    "sizes",
    default="10000,100000",
    show_default=True,
    help="Store sizes, comma-separated (1000000 builds in ~8 minutes on 2 cores).",
)
@click.option("--dim", "dimension", type=int, default=384, show_default=True)
@click.option("--queries", type=int, default=100, show_default=True)
@click.option(
    "--embed-queries",
    type=int,
    default=20,
    show_default=True,
    help="Time the configured model on this many queries (0: skip; no model is loaded).",
)
@click.option(
    "--exact-below",
    type=int,
    default=None,
    help="Use the cascade from this many chunks (default: storage.sqlite.vectors.Tuning's 20000).",
)
@store_dir_option("Keep the synthetic stores here and reuse them on the next run.")
@click.option(
    "--store",
    "pg_url",
    default=None,
    help="Also measure PostgreSQL: postgresql://… (one database per size is created there).",
)
@click.option(
    "--pg-index",
    type=click.Choice(["auto", "hnsw", "exact"]),
    default="auto",
    show_default=True,
    help="The PostgreSQL stores' vector index (auto: hnsw when this machine's CPU runs the "
    "bundled pgvector's HNSW, i.e. has AVX-512, else exact; for a server on this machine).",
)
@REPORT_OPTIONS
@PLOT_OPTION
def scale(
    sizes: str,
    dimension: int,
    queries: int,
    embed_queries: int,
    exact_below: int | None,
    store_dir: Path | None,
    pg_url: str | None,
    pg_index: str,
    sets: tuple[str, ...],
    results: Path,
    as_json: bool,
    plot: bool,
) -> None:
    """Vector and full-search latency, Recall@10, size and RSS on synthetic stores."""
    from bench import scale as scale_bench

    workdir = workdir_for(store_dir)
    settings = common.bench_settings(workdir, overrides(sets))
    report = scale_bench.run(
        parse_sizes(sizes),
        dimension,
        queries,
        workdir,
        store_dir is not None,
        embed_queries,
        settings,
        exact_below,
        pg_url,
        pg_index,
    )
    header = [
        "chunks",
        "route",
        "vector p50/p95",
        "exact p50/p95",
        "full p50/p95",
        "recall@10",
        "index MB",
        "RSS MB",
        "disk MB",
        "build s",
    ]
    rows = [
        [
            s["chunks"],
            s["route"],
            f"{s['vector']['p50_ms']}/{s['vector']['p95_ms']}",
            f"{s['exact']['p50_ms']}/{s['exact']['p95_ms']}",
            f"{s['search_full']['p50_ms']}/{s['search_full']['p95_ms']}",
            s["recall@10"],
            s["index_mb"],
            s["rss_mb"],
            s["disk_mb"],
            s["build_s"],
        ]
        for s in report["sizes"]
    ]
    _emit("scale", report, as_json, results, rows, header, plot)
    embedding = report["query_embedding"]
    if embedding and not as_json:
        click.echo(
            f"query embedding ({embedding['model']}): p50 {embedding['p50_ms']} ms, "
            f"p95 {embedding['p95_ms']} ms"
        )


@main.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@store_dir_option("Where to put the store (emptied first: ingest is timed from scratch).")
@click.option(
    "--via",
    type=click.Choice(["api", "daemon"]),
    default="api",
    show_default=True,
    help="Ingest through the API in this process, or through a `recalld serve` started on "
    "the store folder (`recalld ingest FOLDER`).",
)
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Pipeline and model runs in turn (every other pair model first), each pipeline into "
    "a fresh store; the ratios reported are the medians of the rounds'.",
)
@click.option(
    "--slices",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Ingest the folder in this many consecutive slices, each paired with the model alone "
    "on its chunks, so that each pair sees the same machine speed; the ratio is of the sums.",
)
@REPORT_OPTIONS
def ingest(
    folder: Path,
    store_dir: Path | None,
    via: str,
    rounds: int,
    slices: int,
    sets: tuple[str, ...],
    results: Path,
    as_json: bool,
) -> None:
    """Pipeline throughput (files to searchable) beside the embedding model alone."""
    import shutil

    from bench import ingest as ingest_bench

    workdir = workdir_for(store_dir)
    data = workdir / "data"
    reports = []
    for index in range(rounds):
        if data.exists():
            shutil.rmtree(data)
        # Round i starts with the model when i is odd: pairs alternate across rounds too.
        run = ingest_bench.run(folder, workdir, overrides(sets), via, slices, flip=index)
        reports.append(asyncio.run(run))
    report = ingest_bench.combine(reports)
    header = ["run", "seconds", "CPU s", "chunks/s", "MB/s"]
    rows = [
        [
            "pipeline",
            report["pipeline"]["seconds"],
            report["pipeline"]["cpu_seconds"],
            report["pipeline"]["chunks_per_s"],
            report["pipeline"]["mb_per_s"],
        ],
        [
            "model only",
            report["model_only"]["seconds"],
            report["model_only"]["cpu_seconds"],
            report["model_only"]["chunks_per_s"],
            "",
        ],
    ]
    _emit("ingest", report, as_json, results, rows, header)
    if not as_json:
        click.echo(
            f"{report['files']} files, {report['megabytes']} MB, {report['chunks']} chunks; "
            f"pipeline / model time: {report['overhead_ratio']}, CPU time: {report['cpu_ratio']}"
        )


@main.command()
@click.option(
    "--data",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path("../shared/data/scifact"),
    show_default=True,
    help="A BEIR folder (corpus.jsonl, queries.jsonl).",
)
@click.option("--docs", type=click.IntRange(1), default=500, show_default=True)
@click.option("--from", "source", default="hash:64", show_default=True, help="The old model.")
@click.option("--to", "target", default="hash:32", show_default=True, help="The new model.")
@REPORT_OPTIONS
def reindex(
    data: Path,
    docs: int,
    source: str,
    target: str,
    sets: tuple[str, ...],
    results: Path,
    as_json: bool,
) -> None:
    """Online reindex throughput, and search latency before and during it (same run)."""
    from bench import reindex as reindex_bench

    workdir = workdir_for(None)
    report = asyncio.run(reindex_bench.run(data, workdir, source, target, docs, overrides(sets)))
    header = ["phase", "searches", "errors", "p50 ms", "p95 ms"]
    rows = [
        [
            "before",
            report["searches_before"],
            report["errors_before"],
            report["p50_before_ms"],
            report["p95_before_ms"],
        ],
        [
            "during",
            report["searches_during"],
            report["errors_during"],
            report["p50_during_ms"],
            report["p95_during_ms"],
        ],
    ]
    _emit("reindex", report, as_json, results, rows, header)
    if not as_json:
        click.echo(
            f"{report['from']} -> {report['to']}: {report['chunks']} chunks in "
            f"{report['reindex_s']} s ({report['reindex_chunks_per_s']} chunks/s; the model "
            f"alone: {report['model_only_chunks_per_s']} chunks/s)"
        )


@main.command()
@click.option(
    "--data",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path("../shared/data/scifact"),
    show_default=True,
    help="A BEIR folder; its documents become one file each.",
)
@SPLIT_OPTION
@click.option("--limit", type=click.IntRange(1), default=None, help="Only the first N queries.")
@click.option(
    "--docs",
    type=click.IntRange(1),
    default=None,
    help="Only N documents (every one the chosen queries judge, then the corpus in order).",
)
@click.option("--blocks", type=click.IntRange(1), default=6, show_default=True)
@click.option(
    "--cli-runs", type=click.IntRange(1), default=20, show_default=True, help="Whole processes."
)
@click.option(
    "--peer",
    type=click.Path(path_type=Path),
    default=Path(tempfile.gettempdir()) / "peer-vstash",
    show_default=True,
    help="The venv ../shared/peers/vstash/setup.sh built.",
)
@click.option(
    "--peer-driver",
    type=click.Path(path_type=Path),
    default=Path("../shared/peers/vstash/driver.py"),
    show_default=True,
)
@click.option("--no-peer", is_flag=True, help="Time recalld alone.")
@store_dir_option("Keep both stores here and reuse them on the next run (same --limit/--docs).")
@REPORT_OPTIONS
def perf(
    data: Path,
    split: str,
    limit: int | None,
    docs: int | None,
    blocks: int,
    cli_runs: int,
    peer: Path,
    peer_driver: Path,
    no_peer: bool,
    store_dir: Path | None,
    sets: tuple[str, ...],
    results: Path,
    as_json: bool,
) -> None:
    """Search p50/p95 beside vstash (same folder, queries and run, blocks alternating):
    in-process, over the socket and as a whole CLI process; stage timings, RSS, NDCG@10."""
    from bench import perf as perf_bench

    workdir = workdir_for(store_dir)
    the_peer = None
    if not no_peer:
        python = peer / "bin" / "python"
        if not python.exists() or not peer_driver.exists():
            raise click.UsageError(
                f"no vstash at {python} or no driver at {peer_driver}: run "
                "../shared/peers/vstash/setup.sh (PEER=DIR), pass --peer/--peer-driver, "
                "or --no-peer"
            )
        the_peer = perf_bench.Peer(peer_driver.resolve(), python, workdir)
    report = asyncio.run(
        perf_bench.run(
            data, split, limit, docs, blocks, cli_runs, the_peer, workdir, overrides(sets)
        )
    )
    header = ["system", "p50 ms", "p95 ms", "ratio p50", "per-query ratio"]
    ratios = report.get("ratio_to_vstash", {})
    rows = []
    for name, figures in report["search"].items():
        ratio = ratios.get(name, {})
        rows.append(
            [
                name,
                figures["p50_ms"],
                figures["p95_ms"],
                ratio.get("p50_ratio", ""),
                ratio.get("per_query_median", ""),
            ]
        )
    for name, figures in report["cli"].items():
        if isinstance(figures, dict):
            rows.append([f"cli {name}", figures["p50_ms"], figures["p95_ms"], "", ""])
    _emit("perf", report, as_json, results, rows, header)
    if not as_json:
        click.echo(f"recalld stages (p50 ms): {report['stages_ms_p50']}")
        click.echo(
            f"socket overhead p50: {report['socket_overhead_ms_p50']} ms against in-process; "
            f"client wall minus the daemon's own search time: {report['socket_transport_ms']}"
        )
        click.echo(f"NDCG@10: {report['ndcg@10']}; RSS MB: {report['rss_mb']}")
        click.echo(f"chunks: {report['chunks']}; ingest: {report['ingest']}")


@main.command("links")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--rounds", type=click.IntRange(1, 20), default=3, show_default=True)
@REPORT_OPTIONS
def links(folder: Path, rounds: int, sets: tuple[str, ...], results: Path, as_json: bool) -> None:
    """Ingest time with auto links on and off, in one process (issue 8)."""
    from bench import links as links_bench

    report = asyncio.run(links_bench.run(folder, overrides(sets), rounds))
    header = ["links", "seconds", "chunks/s", "links made"]
    rows = [
        [label, report[key]["seconds"], report[key]["chunks_per_s"], report[key]["links"]]
        for label, key in (("on", "links_on"), ("off", "links_off"))
    ]
    _emit("links", report, as_json, results, rows, header)
    if not as_json:
        click.echo(
            f"store work on/off: {report['store_ratio']}; whole ingest with the model's "
            f"{report['model_seconds']} s: {report['ingest_ratio']}"
        )


@main.command("compare")
@click.argument("first", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("second", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--mode", "modes", multiple=True, help="Modes to compare (default: all in both).")
@click.option("--json", "as_json", is_flag=True)
def compare(first: Path, second: Path, modes: tuple[str, ...], as_json: bool) -> None:
    """Paired randomization tests between two reports of the same queries (e.g. LoCoMo at
    round and at window granularity): each mode of SECOND against the same mode of FIRST."""
    from bench import metrics

    a, b = (json.loads(p.read_text("utf-8")).get("per_query") for p in (first, second))
    if not a or not b:
        raise click.UsageError("both reports need per-query figures (made by this version)")
    names = [m for m in (modes or list(a)) if m in a and m in b]
    out: dict[str, dict[str, dict[str, float]]] = {}
    for mode in names:
        for metric, values in b[mode].items():
            base = a[mode].get(metric)
            if base is None or len(base) != len(values):
                continue
            out.setdefault(mode, {})[metric] = {
                "first": round(metrics.mean(base), 4),
                "second": round(metrics.mean(values), 4),
                "delta": round(metrics.mean(values) - metrics.mean(base), 4),
                "p": round(metrics.randomization_p(values, base), 4),
            }
    if as_json:
        click.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    for mode, figures in out.items():
        for metric, f in figures.items():
            click.echo(
                f"{mode} {metric}: {f['first']} -> {f['second']} ({f['delta']:+.4f}, p={f['p']})"
            )


@main.command("plot")
@click.argument(
    "reports", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
def plot_command(reports: tuple[Path, ...]) -> None:
    """Write a PNG beside each JSON report (scale: latency by size; beir, locomo: quality)."""
    for path in reports:
        _plot(json.loads(path.read_text("utf-8")), path.with_suffix(".png"))


@main.command("tune")
@click.option(
    "--beir",
    "folder",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A BEIR folder: its corpus is tuned on, its split's queries judge.",
)
@click.option(
    "--locomo",
    "locomo_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A LoCoMo JSON file: its conversations are tuned on, their questions judge.",
)
@SPLIT_OPTION
@limit_queries_option()
@store_dir_option()
@click.option("--max-steps", type=click.IntRange(min=0), default=200, show_default=True)
@click.option("--max-seconds", type=click.FloatRange(min=0), default=900, show_default=True)
@click.option(
    "--pseudo-queries",
    type=click.IntRange(min=10),
    default=2000,
    show_default=True,
    help="Chunks drawn for pseudo-queries.",
)
@click.option(
    "--spans-per-chunk",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Pseudo-queries held out of each drawn chunk, at most.",
)
@click.option("--threads", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--learning-rate", type=click.FloatRange(min=0, min_open=True), default=5e-6)
@click.option("--max-epochs", type=click.FloatRange(min=0, min_open=True), default=1.0)
@click.option("--batch-size", type=click.IntRange(min=2), default=16, show_default=True)
@click.option(
    "--frozen-layers",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Keep the embeddings and this many lowest layers as they are (cheaper steps).",
)
@click.option(
    "--length-group",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Encode texts this many at a time by length (less padding; 0: all at once).",
)
@click.option(
    "--conversations",
    type=click.IntRange(min=2),
    help="LoCoMo: only the first N conversations.",
)
@CORPUS_LIMIT_OPTION
@REPORT_OPTIONS
def tune_bench(
    folder: Path | None,
    locomo_file: Path | None,
    split: str,
    limit_queries: int | None,
    store_dir: Path | None,
    max_steps: int,
    max_seconds: float,
    pseudo_queries: int,
    spans_per_chunk: int,
    threads: int,
    learning_rate: float,
    max_epochs: float,
    batch_size: int,
    frozen_layers: int,
    length_group: int,
    conversations: int | None,
    corpus_limit: int | None,
    sets: tuple[str, ...],
    results: Path,
    as_json: bool,
) -> None:
    """Vector and full before and after `recalld tune`, tuned on the data alone (no queries, no
    qrels), with paired randomization p-values (needs the `tune` extra): NDCG@10 on BEIR,
    evidence Recall@5 and recall in 300 returned words on LoCoMo."""
    from bench import tune as tune_bench_module
    from recalld.tune import run as tune_run

    if (folder is None) == (locomo_file is None):
        raise click.UsageError("give --beir FOLDER or --locomo FILE")
    options = tune_run.with_budget(
        tune_run.TuneOptions(queries=pseudo_queries, spans_per_chunk=spans_per_chunk),
        max_steps=max_steps,
        max_seconds=max_seconds,
        threads=threads,
        learning_rate=learning_rate,
        max_epochs=max_epochs,
        batch_size=batch_size,
        frozen_layers=frozen_layers,
        length_group=length_group,
    )
    if locomo_file is not None:
        report = asyncio.run(
            tune_bench_module.run_locomo(
                locomo_file, workdir_for(store_dir), overrides(sets), options, conversations
            )
        )
        metrics: tuple[str, ...] = ("recall@5", "words@300")
    else:
        assert folder is not None
        report = asyncio.run(
            tune_bench_module.run(
                folder,
                split,
                limit_queries,
                workdir_for(store_dir),
                overrides(sets),
                options,
                corpus_limit,
            )
        )
        metrics = ("ndcg@10",)
    header = ["mode", "metric", "before", "after", "delta", "p"]
    rows = [
        [
            mode,
            metric,
            report["before"][mode][metric],
            report.get("after", {}).get(mode, {}).get(metric, "refused"),
            report.get("significance", {}).get(mode, {}).get(metric, {}).get("delta", ""),
            report.get("significance", {}).get(mode, {}).get(metric, {}).get("p", ""),
        ]
        for mode in report["before"]
        for metric in metrics
    ]
    _emit("tune", report, as_json, results, rows, header)


@main.command("calibrate")
@click.option(
    "--store-dir",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A benchmark folder holding a store (its data/), e.g. a copy of bench perf's.",
)
@click.option("--pseudo-queries", type=click.IntRange(min=1), default=200, show_default=True)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Any setting.")
def calibrate_command(store_dir: Path, pseudo_queries: int, sets: tuple[str, ...]) -> None:
    """Time one self-calibration (`recalld calibrate`) of an existing store: wall and CPU
    seconds, the load average around it, and what each content kind chose."""
    from bench import calibrate_cost

    report = asyncio.run(calibrate_cost.run(store_dir, overrides(sets), pseudo_queries))
    click.echo(json.dumps(report, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()

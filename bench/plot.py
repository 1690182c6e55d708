"""PNG plots of benchmark reports: quality by mode (BEIR, LoCoMo) and latency by scale.

matplotlib is in the dev dependency group, not in recalld's own dependencies: it is ~80 MB
installed and only the plots need it. Every function here takes a report as `write_report` wrote it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recalld.errors import RecalldError

# Issue 7's targets, drawn on the latency plot.
TARGETS_MS = {100_000: 15.0, 1_000_000: 60.0}


class PlotUnavailableError(RecalldError):
    """matplotlib is not installed."""


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotUnavailableError(
            "plots need matplotlib; install it with `pip install matplotlib` (`make install` "
            "does; the JSON report was written all the same)"
        ) from exc
    return plt


def _quality_rows(report: dict[str, Any]) -> tuple[str, list[str], dict[str, list[float]]]:
    """(title, metric names, {mode: values}) for a BEIR or LoCoMo report."""
    modes: dict[str, Any] = report["modes"]
    if report.get("benchmark") == "locomo":
        metrics = ["recall@1", "recall@5", "recall@10", "mrr"]
        values = {
            mode: [float(summary.get("overall", {}).get(m, 0.0)) for m in metrics]
            for mode, summary in modes.items()
        }
        title = f"LoCoMo evidence retrieval, all categories ({report.get('granularity', '')})"
    else:
        metrics = ["ndcg@10", "recall@10", "recall@100", "mrr@10"]
        values = {mode: [float(r.get(m, 0.0)) for m in metrics] for mode, r in modes.items()}
        title = f"BEIR {Path(str(report.get('dataset', ''))).name} ({report.get('split', '')})"
    return title, metrics, values


def plot_quality(report: dict[str, Any], out: Path) -> Path:
    """Grouped bars: one group per metric, one bar per mode.

    Raises:
        PlotUnavailableError: matplotlib is not installed.
    """
    plt = _pyplot()
    title, metrics, values = _quality_rows(report)
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    width = 0.8 / max(1, len(values))
    for i, (mode, row) in enumerate(values.items()):
        xs = [j + (i - (len(values) - 1) / 2) * width for j in range(len(metrics))]
        bars = ax.bar(xs, row, width, label=mode)
        ax.bar_label(bars, fmt="%.3f", fontsize=7, padding=1)
    ax.set_xticks(range(len(metrics)), metrics)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("score")
    ax.set_title(f"{title} — model {report.get('model', '?')}", fontsize=10)
    ax.legend(ncols=len(values), loc="upper center", bbox_to_anchor=(0.5, -0.08), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def plot_scale(report: dict[str, Any], out: Path) -> Path:
    """Latency (p50 with the p95 above it) against store size, per route, with the targets.

    Raises:
        PlotUnavailableError: matplotlib is not installed.
    """
    plt = _pyplot()
    sizes = report["sizes"]
    chunks = [s["chunks"] for s in sizes]
    exact_below = report.get("tuning", {}).get("exact_below", 20_000)
    routes = [
        ("vector", f"vector route (cascade from {exact_below // 1000}k)", "tab:blue"),
        ("exact", "exact sqlite-vec KNN", "tab:red"),
        ("vector_filtered", "vector, granularity filter", "tab:cyan"),
        ("search_full", "full hybrid search", "tab:green"),
    ]
    fig, (ax, side) = plt.subplots(
        1, 2, figsize=(10, 4.5), dpi=120, gridspec_kw={"width_ratios": [3, 2]}
    )
    for key, label, colour in routes:
        p50 = [s[key]["p50_ms"] for s in sizes]
        p95 = [s[key]["p95_ms"] for s in sizes]
        ax.plot(chunks, p50, marker="o", color=colour, label=f"{label} p50")
        ax.plot(chunks, p95, marker="^", linestyle=":", color=colour, alpha=0.6)
    for size, target in TARGETS_MS.items():
        ax.plot([size], [target], marker="*", markersize=14, color="black", linestyle="none")
        ax.annotate(
            f"target {target:g} ms",
            (size, target),
            textcoords="offset points",
            xytext=(-70, 8),
            fontsize=8,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("chunks in the store")
    ax.set_ylabel("ms per query (dotted: p95)")
    ax.set_title(f"Search latency, {report.get('dimension')}-d vectors", fontsize=10)
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")

    labels = [f"{c / 1e6:g}M" if c >= 1_000_000 else f"{c / 1000:g}k" for c in chunks]
    recall = [s["recall@10"] for s in sizes]
    bars = side.bar(labels, recall, color="tab:blue", alpha=0.8)
    side.bar_label(bars, fmt="%.3f", fontsize=8)
    side.axhline(0.99, color="black", linestyle="--", linewidth=1)
    side.set_ylim(min(0.9, min(recall) - 0.02), 1.01)
    side.set_title("Recall@10 vs exact; index MB in bars", fontsize=10)
    for bar, s in zip(bars, sizes, strict=True):
        side.text(
            bar.get_x() + bar.get_width() / 2,
            side.get_ylim()[0] + 0.005,
            f"{s['index_mb']:g} MB",
            ha="center",
            fontsize=8,
            color="white",
        )
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def plot_report(report: dict[str, Any], out: Path) -> Path:
    """The plot that suits the report (`scale`, `beir` or `locomo`).

    Raises:
        PlotUnavailableError: matplotlib is not installed.
    """
    if report.get("benchmark") == "scale":
        return plot_scale(report, out)
    return plot_quality(report, out)

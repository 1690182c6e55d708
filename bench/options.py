"""The click options the benchmark commands share, and the parsers of their values.

Each option is written once here and applied by name in `__main__`, so a flag means the same
thing, with the same default, on every command that takes it.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from bench import common

RESULTS = Path("bench-results")
F = TypeVar("F", bound=Callable[..., Any])


def REPORT_OPTIONS(command: F) -> F:
    """The options every benchmark shares: `--set`, `--results`, `--json`."""
    command = click.option("--json", "as_json", is_flag=True)(command)
    command = click.option(
        "--results", type=click.Path(path_type=Path), default=RESULTS, show_default=True
    )(command)
    return click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Any setting.")(
        command
    )


def store_dir_option(help: str | None = None) -> Callable[[F], F]:
    """`--store-dir DIR`; `help` says what the command keeps there (see `workdir_for`)."""
    return click.option("--store-dir", type=click.Path(path_type=Path), default=None, help=help)


def limit_queries_option(help: str | None = None) -> Callable[[F], F]:
    """`--limit-queries N`: only the first N queries."""
    return click.option("--limit-queries", type=int, default=None, help=help)


PLOT_OPTION = click.option(
    "--plot", is_flag=True, help="Also write a PNG beside the JSON report (needs matplotlib)."
)
SPLIT_OPTION = click.option("--split", default="train", show_default=True)
MODE_OPTION = click.option(
    "--mode",
    "modes",
    multiple=True,
    type=click.Choice(list(common.MODES)),
    default=list(common.MODES),
    show_default=True,
)
CORPUS_LIMIT_OPTION = click.option(
    "--corpus-limit",
    type=click.IntRange(1),
    default=None,
    help="Only the first N documents, and the queries whose judged documents are all in them.",
)
CALIBRATE_OPTION = click.option(
    "--calibrate",
    is_flag=True,
    help="Let each store calibrate its fusion and answerability first (timed) and add the mode "
    "`calibrated`.",
)
CALIBRATION_SEED_OPTION = click.option(
    "--calibration-seed",
    type=int,
    default=0,
    show_default=True,
    help="The seed the stores draw their pseudo-queries with (--calibrate).",
)
VARIANT_OPTION = click.option(
    "--variant",
    "specs",
    multiple=True,
    metavar="NAME:KEY=VALUE,...",
    help="An extra mode: the defaults with some search settings changed, e.g. "
    "'rrf:fusion=rrf'. Compared with bm25 and vector like every mode.",
)


def overrides(pairs: tuple[str, ...]) -> dict[str, str]:
    """`--set key=value` pairs as a dict."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"expected key=value, got {pair!r}")
        out[key] = value
    return out


def parse_variants(specs: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """`name:key=value,...` specs as {name: search overrides} (values JSON where they parse)."""
    out: dict[str, dict[str, Any]] = {}
    for spec in specs:
        name, sep, body = spec.partition(":")
        if not sep or not name:
            raise click.BadParameter(f"expected name:key=value,..., got {spec!r}")
        settings: dict[str, Any] = {}
        for pair in filter(None, body.split(",")):
            key, eq, raw = pair.partition("=")
            if not eq:
                raise click.BadParameter(f"expected key=value in {spec!r}, got {pair!r}")
            try:
                settings[key.strip()] = json.loads(raw)
            except json.JSONDecodeError:
                settings[key.strip()] = raw
        out[name] = settings
    return out


def parse_sizes(value: str) -> list[int]:
    """`--chunks 10000,100000` as a list of store sizes."""
    try:
        out = [int(v.replace("_", "")) for v in value.split(",") if v.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"expected sizes like 10000,100000, got {value!r}") from exc
    if not out or min(out) < 1:
        raise click.BadParameter("give at least one positive size")
    return out


def workdir_for(store_dir: Path | None) -> Path:
    """`--store-dir` made if missing, or a fresh temporary folder without it."""
    if store_dir is not None:
        store_dir.mkdir(parents=True, exist_ok=True)
        return store_dir
    return Path(tempfile.mkdtemp(prefix="recalld-bench-"))

"""`recalld search` without click: the launcher's fast path (issue 20).

click and its command tree cost a search more start-up time than the search itself. This module
reads the plain forms of `recalld search` (words and the options below, each value given as the
next argument) and runs the same body as the click command (`searching.search_and_show`).
Anything else it does not accept: `--help`, `--project`, `--opt=value`, `--`, an unknown option or
a value click would refuse all go through click (`run` returns None), so help, usage errors and
their exit codes stay click's own.
"""

from __future__ import annotations

import os
import stat

from recalld.cli.searching import SEARCH_MODES

# typing is left out of `recalld search`'s start-up (issue 20): mypy reads this block only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FLAGS = {"--json": "as_json", "--explain": "explain", "--no-time": "no_time"}
# Each option and the command's parameter it sets.
VALUES = {
    "--limit": "limit",
    "-n": "limit",
    "--mode": "mode",
    "--expand": "expand",
    "--budget": "budget",
    "--since": "since",
    "--after": "since",
    "--until": "until",
    "--before": "until",
    "--config": "config_file",
}
REPEATED = {
    "--source": "sources",
    "--kind": "kinds",
    "--granularity": "granularities",
    "--tag": "tags",
    "--set": "sets",
}
# The command's `click.IntRange`s.
RANGES = {"limit": (1, 1000), "expand": (0, 20), "budget": (1, 1_000_000)}


def _value(name: str, text: str) -> Any:
    """The option's value as the click command gets it, or None when click would refuse it
    (or might read it differently)."""
    if name in RANGES:
        low, high = RANGES[name]
        if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
            return None
        return int(text)
    if name == "mode":
        return text if text in SEARCH_MODES else None
    if name == "config_file":
        from pathlib import Path  # only with --config: `recalld search` starts without it

        # click.Path(dir_okay=False): a path that is not there is taken as it is; one that is
        # must be a readable file.
        try:
            mode = os.stat(text).st_mode
        except OSError:
            return Path(text)
        return Path(text) if not stat.S_ISDIR(mode) and os.access(text, os.R_OK) else None
    return text


def _item(name: str, text: str) -> str | None:
    """One value of a repeated option, or None when click would refuse it."""
    if name in ("kinds", "granularities"):
        from recalld.types import GRANULARITIES, KINDS  # only when asked: its dataclasses cost

        return text if text in (KINDS if name == "kinds" else GRANULARITIES) else None
    if name == "sets":
        key, sep, _ = text.partition("=")
        return text if sep and key.strip() else None
    return text


def parse(args: list[str]) -> dict[str, Any] | None:
    """The click command's parameters for `recalld search ARGS`, or None to leave it to click."""
    params: dict[str, Any] = {
        "query": [],
        "limit": None,
        "mode": None,
        "expand": None,
        "budget": None,
        "since": None,
        "until": None,
        "config_file": None,
        "explain": False,
        "no_time": False,
        "as_json": False,
        "project": None,
        **{name: [] for name in REPEATED.values()},
    }
    rest = iter(args)
    for arg in rest:
        if arg[:1] != "-" or arg == "-":  # as click tells an option from an argument
            params["query"].append(arg)
        elif arg in FLAGS:
            params[FLAGS[arg]] = True
        elif arg in VALUES or arg in REPEATED:
            text = next(rest, None)
            if text is None:
                return None
            if arg in VALUES:
                name = VALUES[arg]
                value = _value(name, text)
                if value is None:
                    return None
                params[name] = value  # given twice, the last one counts (as in click)
            else:
                name = REPEATED[arg]
                item = _item(name, text)
                if item is None:
                    return None
                params[name].append(item)
        else:
            return None
    if not params["query"]:
        return None
    return {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}


def run(args: list[str]) -> int | None:
    """Run `recalld search ARGS` and return its exit code, or None to leave it to click."""
    if "_RECALLD_COMPLETE" in os.environ:  # click's shell completion
        return None
    params = parse(args)
    if params is None:
        return None
    from recalld.cli.connection import searching_client
    from recalld.cli.searching import search_and_show
    from recalld.errors import RecalldError

    config_file, sets = params.pop("config_file"), params.pop("sets")
    query, as_json = params.pop("query"), params["as_json"]
    try:
        client, settings = searching_client(config_file, sets)
        with client:
            search_and_show(client, settings, query, **params)
    except (RecalldError, OSError, EOFError, KeyboardInterrupt) as exc:
        from recalld.cli.app import exit_outside_click

        exit_outside_click(exc, as_json)
    return 0

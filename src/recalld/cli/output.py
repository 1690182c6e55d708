"""Output for people (rich tables on stdout) and for scripts (`--json`).

rich (and datetime) are imported on first use, so `recalld --help` and `recalld search --json`
stay fast.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence

# typing is left out of `recalld search`'s start-up (issue 20): mypy reads this block only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from rich.console import Console


# Piped output is for other programs: no 80-column cut (issue 17).
PIPE_WIDTH = 10_000


def console(stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr); one that is not a terminal is not cut at a width."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else PIPE_WIDTH
    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=width)


def print_json(data: Any) -> None:
    """Print `data` as indented JSON on stdout."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")


def emit(data: Any, as_json: bool, render: Callable[[Console], None]) -> None:
    """Print `data` as JSON, or let `render` draw it for people."""
    if as_json:
        print_json(data)
    else:
        render(console())


def table(
    out: Console, columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None
) -> None:
    """Draw a simple table."""
    from rich.table import Table

    # Piped: plain columns, one row a line, so `grep` and `cut` work on it.
    box = None if not out.is_terminal else _default_box()
    grid = Table(
        title=title, show_lines=False, header_style="bold", box=box, pad_edge=box is not None
    )
    for column in columns:
        grid.add_column(column, overflow="fold")
    for row in rows:
        grid.add_row(*("" if v is None else str(v) for v in row))
    out.print(grid)


def _default_box() -> Any:
    from rich import box

    return box.HEAVY_HEAD  # rich's default for tables


def pairs(out: Console, rows: Iterable[tuple[str, Any]], title: str | None = None) -> None:
    """Draw a two-column key/value table."""
    from rich.table import Table

    grid = Table(title=title, show_header=False, box=None, pad_edge=False)
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for key, value in rows:
        grid.add_row(key, "" if value is None else str(value))
    out.print(grid)


def snippet(text: str, width: int = 160) -> str:
    """One line of `text`, cut to `width` characters."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def when(stamp: float | None) -> str:
    """A unix time as a local date-time, or empty."""
    if stamp is None:
        return ""
    import datetime as dt  # only here: `recalld search --json` never needs it

    return dt.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M")


def duration(seconds: float) -> str:
    """`93784` → `1d 2h 3m`."""
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{v}{u}" for v, u in ((days, "d"), (hours, "h"), (minutes, "m")) if v]
    return " ".join(parts) or f"{secs}s"

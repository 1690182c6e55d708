"""The body of `recalld search`: send the search, show the result (a table or JSON).

Shared by the click command (`recalld.cli.search`) and the launcher's fast path
(`recalld.cli.fast_search`), so both print the same bytes. Imports no click (issue 20).
"""

from __future__ import annotations

from collections.abc import Mapping

from recalld.cli.output import emit, snippet, table
from recalld.projects import project_of

# typing is left out of `recalld search`'s start-up (issue 20): mypy reads this block only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from rich.console import Console

    from recalld.client import Client

SEARCH_MODES = ("hybrid", "vector", "bm25")


def _routes(explain: dict[str, Any]) -> str:
    parts = []
    for route, detail in explain.get("routes", {}).items():
        extra = ", ".join(f"{k} {v}" for k, v in detail.items() if k != "rank")
        parts.append(f"{route} #{detail.get('rank')} ({extra})")
    return "; ".join(parts) or "-"


def search_and_show(
    client: Client,
    settings: Mapping[str, Any],
    query: tuple[str, ...],
    *,
    limit: int | None,
    mode: str | None,
    explain: bool,
    expand: int | None,
    sources: tuple[str, ...],
    kinds: tuple[str, ...],
    granularities: tuple[str, ...],
    tags: tuple[str, ...],
    since: str | None,
    until: str | None,
    budget: int | None,
    no_time: bool,
    project: str | None,
    as_json: bool,
) -> None:
    """Search through `client` with the command's options and the client's own search
    `settings` (`config.request_settings`), and print the result."""
    filters = {
        "sources": list(sources),
        "kinds": list(kinds),
        "granularities": list(granularities),
        "tags": list(tags),
        "since": since,
        "until": until,
        "project": project_of(project) if project else None,
    }
    result = client.search(
        " ".join(query),
        limit=limit,
        mode=mode,
        filters=filters,
        explain=explain,
        expand=expand,
        budget_tokens=budget,
        time_aware=False if no_time else None,
        settings=settings,
    )

    def render(out: Console) -> None:
        hits = result["hits"]
        if not hits:
            reason = " (no confident match)" if result.get("rejected") else ""
            out.print(f"No results{reason}.")
            return
        rows = [
            (
                i,
                f"{h['score']:.4f}",
                h["id"],
                f"{h['kind']}/{h['granularity']}",
                h["source"],
                snippet(h.get("context") or h["text"]),
            )
            for i, h in enumerate(hits, start=1)
        ]
        table(
            out,
            ["#", "score", "id", "kind", "source", "text"],
            rows,
            title=f"{len(hits)} hits, confidence {result['tier']}",
        )
        packing = result.get("packing")
        if packing:
            out.print(
                f"packed {packing['used_tokens']}/{packing['budget_tokens']} tokens; "
                f"dropped {len(packing['dropped'])} hits, "
                f"{len(packing['context_dropped'])} contexts"
            )
        if explain:
            time_note = result.get("explain", {}).get("time")
            if time_note:
                out.print(
                    f"  time: {', '.join(time_note['phrases'])} -> "
                    f"{time_note['start'] or '...'} to {time_note['end'] or '...'}"
                    f"{', order ' + time_note['order'] if time_note['order'] else ''}"
                    f" (anchor {time_note['anchor']}, {time_note['mode']})",
                    markup=False,
                )
            for i, hit in enumerate(hits, start=1):
                out.print(f"  #{i} id {hit['id']}: {_routes(hit.get('explain', {}))}")
                if redacted := (hit.get("meta") or {}).get("redacted"):
                    kinds = ", ".join(sorted({r["type"] for r in redacted}))
                    out.print(f"      redacted before storing: {kinds}", markup=False)

    emit(result, as_json, render)

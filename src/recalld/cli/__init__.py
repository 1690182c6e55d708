"""The `recalld` command line: the daemon (`recalld serve`) and a client for people and scripts.

The click application is `recalld.cli.app` (`cli`, and `main`, the console entry point); this
package itself imports nothing, so its click-free modules (`connection`, `searching`, `output`
and the launcher's fast `recalld search`, `fast_search`) start without click (issue 20).
"""

from __future__ import annotations

# typing is left out of `recalld search`'s start-up (issue 20): mypy reads this block only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from recalld.cli.app import cli, main

__all__ = ["cli", "main"]


def __getattr__(name: str) -> Any:
    # `from recalld.cli import main` keeps working; click is imported only then.
    if name in __all__:
        from recalld.cli import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

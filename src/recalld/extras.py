"""Optional parts of recalld and the error that names the extra to install (issue 17).

The default install reads text, Markdown, code, conversations, PDF, DOCX, HTML, EPUB, CSV and
notebooks, embeds with the packaged model and stores in SQLite. These need an extra:

    office    PPTX and XLSX (python-pptx, pandas, openpyxl through markitdown)
    openai    `openai:` embedding models and LLM facts / knowledge updates (the openai client)
    postgres  a `postgresql://` store (psycopg)
"""

from __future__ import annotations

import functools
import importlib

from recalld.errors import ConfigError, RecalldError


@functools.cache
def installed(module: str) -> bool:
    """Whether `module` can be imported here (checked once per process)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def require(
    modules: tuple[str, ...], extra: str, what: str, error: type[RecalldError] = ConfigError
) -> None:
    """Raise `error` naming the extra to install when a module of it is missing.

    Args:
        modules: What the extra installs, as import names.
        extra: The extra's name, e.g. `office`.
        what: What needs it, e.g. "reading .xlsx files".
        error: The class raised (a per-file failure is an `IngestError`).
    """
    missing = [m for m in modules if not installed(m)]
    if missing:
        raise error(
            f"{what} needs recalld's `{extra}` extra ({', '.join(missing)} is not installed): "
            f"pip install 'recalld[{extra}]'",
            data={"extra": extra, "missing": missing},
        )

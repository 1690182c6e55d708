"""Passwords inside URLs are never shown (issue 18).

A URL may carry a password: `embed.base_url = "http://user:pw@host/v1"`, `facts.base_url`, a
`postgresql://user:pw@host/db` store. Every place recalld shows text that may hold one passes
it through `mask` first: `config show` (`config.settings_as_dict`), `models/list`
(`embeddings.catalog`), error answers (`protocol.error_response`), the CLI's error line, and
the daemon's log formatter. The URL keeps its user, host and path, so it can still be
recognised; only the password becomes `****`.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "****"

# scheme://user:password@ — the password runs to the last "@" before the host (an unescaped
# "@" inside a password still counts as the password's).
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*:)(?P<secret>[^/\s]*)@")
# ...?password=secret, and a libpq key/value string's password=secret.
_PARAMETER = re.compile(r"(?P<head>(?:[?&]|\b)password=)(?P<secret>[^&\s]+)", re.IGNORECASE)


def mask(text: str) -> str:
    """`text` with the password of every URL in it replaced by `****`."""
    if "://" not in text and "password=" not in text.lower():
        return text
    text = _USERINFO.sub(lambda m: f"{m['head']}{MASK}@", text)
    return _PARAMETER.sub(lambda m: f"{m['head']}{MASK}", text)


def mask_value(value: Any) -> Any:
    """`mask` applied to a string, or to the strings of a list, tuple or dict (one level deep
    for containers of containers too); other values as they are."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, list | tuple):
        return type(value)(mask_value(v) for v in value)
    if isinstance(value, dict):
        return {k: mask_value(v) for k, v in value.items()}
    return value

"""JSON for the agent hook through the json package's C core (`_json`), without `json` itself.

`import json` pulls in `re` (its pure-Python parts compile regular expressions at import),
which on the two-core test machine under load cost as much as the rest of the hook put
together; the C scanner and encoder that `json` itself uses on CPython need neither.
"""

from __future__ import annotations

import _json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

_WHITESPACE = " \t\n\r"


class _Options:
    """What the C scanner reads from a decoder: json.loads's defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {
        "NaN": float("nan"),
        "Infinity": float("inf"),
        "-Infinity": float("-inf"),
    }.__getitem__


def _unserializable(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# typeshed types the scanner's argument as the scanner itself; it reads these attributes.
_scan = _json.make_scanner(_Options())  # type: ignore[arg-type]
# json.dumps(value, ensure_ascii=False, separators=(",", ":")), as the daemon writes it.
_encode: Callable[[object, int], tuple[str, ...]] = _json.make_encoder(
    {}, _unserializable, _json.encode_basestring, None, ":", ",", False, False, True
)


def loads(text: str) -> object:
    """Parse one JSON value.

    Raises:
        ValueError: `text` is not exactly one JSON value.
    """
    stripped = text.strip(_WHITESPACE)
    try:
        value, end = _scan(stripped, 0)
    except StopIteration:
        raise ValueError("not JSON") from None
    except Exception as exc:  # the scanner's own errors (JSONDecodeError, RecursionError)
        raise ValueError(f"not JSON: {exc}") from None
    if end != len(stripped):
        raise ValueError("extra data after the JSON value")
    return value


def dumps(value: object) -> str:
    """Compact JSON, UTF-8 characters as they are."""
    return "".join(_encode(value, 0))

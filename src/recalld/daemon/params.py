"""Typed access to a request's named params, so every method validates the same way.

A missing required param, a value of the wrong type or out of range, or a param the method
does not know all raise `InvalidParams`, which the dispatcher answers with -32602 naming the
param. Every number must be finite (`1e400` and `Infinity` reach Python as `inf`), every
integer fit SQLite's 64 bits, every time lie in the years 1 to 9999 (`recalld.limits`), and
every string but a memory's text stay under `MAX_STRING`: a value the daemon could store but
not read back or send again never gets in (issue 18).
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from recalld import limits
from recalld.types import GRANULARITIES, KINDS, Filters

_MISSING: Any = object()
# Characters in a string param (a query, a tag, a name); a memory's text may be longer.
MAX_STRING = 65_536
# Bytes in a path param: Linux's PATH_MAX.
MAX_PATH = 4096
# Strings in a list param (tags, sources).
MAX_ITEMS = 1000


class InvalidParams(Exception):
    """A param is missing, unknown or of the wrong type.

    Args:
        message: What is wrong and what was expected.
        param: The param's name.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def _encodable(text: str) -> bool:
    """Whether `text` can be stored and sent as UTF-8 (JSON's `\\ud800` cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _type_name(kind: type | tuple[type, ...]) -> str:
    names = {
        "str": "a string",
        "int": "an integer",
        "float": "a number",
        "bool": "a boolean",
        "list": "a list",
        "dict": "an object",
    }
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k.__name__, k.__name__) for k in kinds)


class Params:
    """A request's params, read one by one with `str`, `int`, ..., then closed with `done`."""

    def __init__(self, raw: dict[str, Any], prefix: str = "") -> None:
        self.raw = raw
        self.prefix = prefix
        self._used: set[str] = set()

    def _get(self, name: str, kind: type | tuple[type, ...], default: Any) -> Any:
        self._used.add(name)
        value = self.raw.get(name, _MISSING)
        if value is _MISSING or value is None:
            if default is _MISSING:
                raise InvalidParams(f"missing param {self.prefix + name!r}", self.prefix + name)
            return default
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # bool is an int in Python but not in JSON; int is accepted where a float is expected.
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if not ok and float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            raise InvalidParams(
                f"param {self.prefix + name!r} must be {_type_name(kind)}", self.prefix + name
            )
        if isinstance(value, str) and not _encodable(value):
            raise InvalidParams(
                f"param {self.prefix + name!r} is not valid Unicode (it holds a lone surrogate "
                "such as \\ud800)",
                self.prefix + name,
            )
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and not limits.is_number(value)
        ):
            raise InvalidParams(
                f"param {self.prefix + name!r} must be a finite number"
                + (" within 64 bits" if isinstance(value, int) else ""),
                self.prefix + name,
            )
        return value

    def string(
        self,
        name: str,
        default: Any = _MISSING,
        *,
        blank: bool = False,
        longest: int | None = MAX_STRING,
    ) -> Any:
        """A string param (not blank when required, unless `blank`), of at most `longest`
        characters (None: only the protocol's line limit)."""
        value = self._get(name, str, default)
        if default is _MISSING and not blank and not value.strip():
            raise InvalidParams(
                f"param {self.prefix + name!r} must not be empty", self.prefix + name
            )
        if isinstance(value, str) and longest is not None and len(value) > longest:
            raise InvalidParams(
                f"param {self.prefix + name!r} is {len(value)} characters long, over the "
                f"limit of {longest}",
                self.prefix + name,
            )
        return value

    def path(self, name: str) -> str:
        """An absolute path param (the daemon has its own working directory)."""
        value: str = self.string(name, longest=MAX_PATH)
        if "\x00" in value:
            raise InvalidParams(
                f"param {self.prefix + name!r} must not contain a NUL character",
                self.prefix + name,
            )
        if len(value.encode("utf-8", "surrogateescape")) > MAX_PATH:
            raise InvalidParams(
                f"param {self.prefix + name!r} is longer than {MAX_PATH} bytes",
                self.prefix + name,
            )
        if not value.startswith("/"):
            raise InvalidParams(
                f"param {self.prefix + name!r} must be an absolute path (the daemon has its "
                "own working directory)",
                self.prefix + name,
            )
        return value

    def integer(
        self, name: str, default: Any = _MISSING, *, low: int | None = None, high: int | None = None
    ) -> Any:
        """An integer param, optionally bounded (always within SQLite's 64 bits)."""
        value = self._get(name, int, default)
        low = limits.INT_MIN if low is None else low
        high = limits.INT_MAX if high is None else high
        if value is not None and not low <= value <= high:
            raise InvalidParams(
                f"param {self.prefix + name!r} must be between {low} and {high}", self.prefix + name
            )
        return value

    def number(self, name: str, default: Any = _MISSING) -> Any:
        """A finite number param."""
        return self._get(name, float, default)

    def boolean(self, name: str, default: Any = _MISSING) -> Any:
        """A boolean param."""
        return self._get(name, bool, default)

    def strings(self, name: str, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
        """A list of strings (a single string is taken as a list of one); default empty."""
        value = self._get(name, (list, str), [])
        items = [value] if isinstance(value, str) else value
        if not all(isinstance(v, str) and _encodable(v) for v in items):
            raise InvalidParams(
                f"param {self.prefix + name!r} must be a list of strings", self.prefix + name
            )
        if len(items) > MAX_ITEMS or any(len(v) > MAX_STRING for v in items):
            raise InvalidParams(
                f"param {self.prefix + name!r} must be at most {MAX_ITEMS} strings of at most "
                f"{MAX_STRING} characters",
                self.prefix + name,
            )
        if allowed is not None:
            for item in items:
                if item not in allowed:
                    raise InvalidParams(
                        f"param {self.prefix + name!r}: {item!r} is not one of "
                        f"{', '.join(allowed)}",
                        self.prefix + name,
                    )
        return tuple(items)

    def time(self, name: str) -> float | None:
        """A point in time: unix seconds, or an ISO 8601 date or date-time (UTC if naive),
        within the years 1 to 9999."""
        value = self._get(name, (int, float, str), None)
        if value is None:
            return None
        if isinstance(value, str):
            try:
                parsed = dt.datetime.fromisoformat(value)
                if parsed.tzinfo is None:
                    parsed = parsed.replace(tzinfo=dt.UTC)
                value = parsed.timestamp()
            except (ValueError, OverflowError) as exc:
                raise InvalidParams(
                    f"param {self.prefix + name!r} must be unix seconds or an ISO 8601 date",
                    self.prefix + name,
                ) from exc
        if not limits.is_time(value):
            raise InvalidParams(
                f"param {self.prefix + name!r} must be a time between 0001-01-01 and "
                f"9999-12-31 (unix seconds {limits.TIME_MIN:.0f} to {limits.TIME_MAX:.0f})",
                self.prefix + name,
            )
        return float(value)

    def object(self, name: str) -> Params:
        """A nested object param, read the same way; default empty."""
        return Params(self._get(name, dict, {}), f"{self.prefix}{name}.")

    def filters(self) -> Filters:
        """The `filters` object of `search` and `forget`: sources, kinds, granularities,
        tags, since, until and project."""
        f = self.object("filters")
        filters = Filters(
            sources=f.strings("sources"),
            kinds=f.strings("kinds", KINDS),
            granularities=f.strings("granularities", GRANULARITIES),
            tags=f.strings("tags"),
            since=f.time("since"),
            until=f.time("until"),
            project=f.project("project"),
        )
        f.done()
        return filters

    def project(self, name: str) -> str | None:
        """An optional project: an absolute folder path (issue 21), kept as given."""
        value: str | None = self.string(name, None)
        if value is not None and not os.path.isabs(value):
            raise InvalidParams(
                f"param {self.prefix + name!r} must be an absolute path (a project folder)",
                self.prefix + name,
            )
        return value

    def done(self) -> None:
        """Refuse params the method did not read (typos should not pass silently)."""
        unknown = sorted(set(self.raw) - self._used)
        if unknown:
            raise InvalidParams(
                f"unknown param {self.prefix + unknown[0]!r}", self.prefix + unknown[0]
            )

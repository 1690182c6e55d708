"""The settings a client command runs with and the client it talks through, resolved the
daemon's way (defaults < file < `RECALLD_*` env < `--set`), so a client finds the socket the
daemon listens on without being told.

Imports no click, so the launcher's fast `recalld search` can use it (issue 20).
"""

from __future__ import annotations

import os
from pathlib import Path

from recalld.client import Client
from recalld.config import LoadedSettings, load_settings, socket_candidates


def parse_sets(values: tuple[str, ...]) -> dict[str, str]:
    """`("embed.model=hash:64",)` → `{"embed.model": "hash:64"}`.

    Raises:
        click.BadParameter: A value has no `=` (click is imported only then).
    """
    pairs: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            import click

            raise click.BadParameter(
                f"{item!r} is not KEY=VALUE (e.g. embed.model=local)", param_hint="--set"
            )
        pairs[key.strip()] = value
    return pairs


def load(config_file: Path | None, sets: tuple[str, ...]) -> LoadedSettings:
    """Resolve settings from the process environment, the config file and `--set`."""
    return load_settings(config_file, os.environ, parse_sets(sets))


def client_for(loaded: LoadedSettings) -> Client:
    """A client for the daemon these settings name, trying the other known places after."""
    places = socket_candidates(loaded, os.environ)
    timeout = loaded.settings.client.timeout_s or None
    return Client(places[0], timeout=timeout, fallbacks=places[1:])


def connect(config_file: Path | None, sets: tuple[str, ...]) -> Client:
    """A client for the daemon these settings name."""
    return client_for(load(config_file, sets))

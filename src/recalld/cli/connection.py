"""The settings a client command runs with and the client it talks through, resolved the
daemon's way (defaults < file < `RECALLD_*` env < `--set`), so a client finds the socket the
daemon listens on without being told.

Imports no click, so the launcher's fast `recalld search` can use it (issue 20).
"""

from __future__ import annotations

import os

from recalld.client import Client
from recalld.places import CLIENT_TIMEOUT_S, plain_socket_places

# typing is left out of `recalld search`'s start-up (issue 20): mypy reads this block only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from recalld.config import LoadedSettings


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
    from recalld.config import load_settings

    return load_settings(config_file, os.environ, parse_sets(sets))


def client_for(loaded: LoadedSettings) -> Client:
    """A client for the daemon these settings name, trying the other known places after."""
    from recalld.config import socket_candidates

    places = socket_candidates(loaded, os.environ)
    timeout = loaded.settings.client.timeout_s or None
    return Client(places[0], timeout=timeout, fallbacks=places[1:])


def connect(config_file: Path | None, sets: tuple[str, ...]) -> Client:
    """A client for the daemon these settings name."""
    return client_for(load(config_file, sets))


def searching_client(
    config_file: Path | None, sets: tuple[str, ...]
) -> tuple[Client, dict[str, Any]]:
    """A client and the search settings it sends (`config.request_settings`), as `load` and
    `client_for` make them; without loading the settings when there is nothing to resolve
    (no `--config`, no `--set`, no config file, no `RECALLD_*` but the home and the socket):
    then only the socket differs from the defaults, and no search setting is sent."""
    places = None if config_file is not None or sets else plain_socket_places(os.environ)
    if places is not None:
        return Client(places[0], timeout=CLIENT_TIMEOUT_S, fallbacks=places[1:]), {}
    from recalld.config import request_settings

    loaded = load(config_file, sets)
    return client_for(loaded), request_settings(loaded)

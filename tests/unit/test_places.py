"""`places.plain_socket_places`, the client's way to the daemon without loading the settings
(issue 20), against `config.socket_candidates` over loaded settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from recalld.cli.connection import searching_client
from recalld.config import Settings, load_settings, request_settings, socket_candidates
from recalld.places import CLIENT_TIMEOUT_S, plain_socket_places


def _envs(tmp: Path) -> list[dict[str, str]]:
    home = {"HOME": str(tmp)}
    xdg = {**home, "XDG_RUNTIME_DIR": "/run/user/1000", "XDG_CACHE_HOME": str(tmp / "c")}
    return [
        home,
        xdg,
        {**xdg, "RECALLD_HOME": str(tmp / "rh")},
        {**xdg, "RECALLD_HOME": ""},
        {**home, "RECALLD_DAEMON__SOCKET": str(tmp / "s.sock")},
        {**xdg, "RECALLD_DAEMON__SOCKET": ""},
        {**xdg, "RECALLD_HOME": str(tmp / "rh"), "RECALLD_DAEMON__SOCKET": "~/d.sock"},
    ]


def test_the_plain_places_are_the_loaded_settings_places(tmp_path: Path) -> None:
    for env in _envs(tmp_path):
        loaded = load_settings(None, env)
        assert plain_socket_places(env) == socket_candidates(loaded, env), env
        assert request_settings(loaded) == {}
    assert Settings().client.timeout_s == CLIENT_TIMEOUT_S


def test_anything_to_resolve_loads_the_settings(tmp_path: Path) -> None:
    home = {"HOME": str(tmp_path), "RECALLD_HOME": str(tmp_path)}
    assert plain_socket_places({**home, "RECALLD_SEARCH__LIMIT": "2"}) is None
    assert plain_socket_places({**home, "RECALLD_CLIENT__TIMEOUT_S": "x"}) is None
    (tmp_path / "config.toml").write_text("[search]\nlimit = 2\n")
    assert plain_socket_places(home) is None


def test_a_searching_client_sends_what_the_settings_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECALLD_HOME", str(tmp_path))
    monkeypatch.setenv("RECALLD_DAEMON__SOCKET", str(tmp_path / "s.sock"))
    client, settings = searching_client(None, ())
    assert (client.socket_path, client.fallbacks, client.timeout) == (
        tmp_path / "s.sock",
        [],
        CLIENT_TIMEOUT_S,
    )
    assert settings == {}
    client, settings = searching_client(None, ("search.limit=2",))
    assert settings == {"limit": 2} and client.socket_path == tmp_path / "s.sock"
    (tmp_path / "config.toml").write_text("[client]\ntimeout_s = 5\n")
    client, settings = searching_client(None, ())
    assert client.timeout == 5 and settings == {}

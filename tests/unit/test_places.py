"""`places.plain_socket_places`, the client's way to the daemon without loading the settings
(issue 20), against `config.socket_candidates` over loaded settings."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import pytest

from recalld.cli.connection import searching_client
from recalld.client import Client
from recalld.config import Settings, load_settings, request_settings, socket_candidates
from recalld.places import (
    CLIENT_TIMEOUT_S,
    default_config_path,
    default_dirs,
    plain_socket_places,
    posix_path,
    socket_file,
    socket_places,
)


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
        plain = plain_socket_places(env)
        assert plain is not None
        assert [Path(p) for p in plain] == socket_candidates(loaded, env), env
        assert plain == [str(p) for p in socket_candidates(loaded, env)], env
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


# Written as pathlib would, without importing it (start-up, issue 20): the same strings as the
# `Path` arithmetic `places` used before, over awkward spellings.
ODD = ["", ".", "/", "//", "///", "a", "a/", "a//b", "./a/./b/.", "/a/../b", "//a/b", "///a", "~"]


def test_posix_path_prints_what_pathlib_prints() -> None:
    for text in [*ODD, "~/x//y/", "~root/a", "a/~/b", "/tmp/x/"]:
        assert posix_path(text) == str(PurePosixPath(text)), text


def _before(env: dict[str, str]) -> tuple[dict[str, str], Path, list[Path], Path]:
    """default_dirs, default_config_path, socket_places and socket_file as `Path`s made them."""
    home = Path(env.get("HOME", str(Path.home())))
    if root := env.get("RECALLD_HOME"):
        base = Path(root)
        dirs = {k: str(base / v) for k, v in (("data_dir", "data"), ("cache_dir", "cache"))}
        dirs["runtime_dir"] = str(base / "run")
        config = base / "config.toml"
    else:
        data = Path(env.get("XDG_DATA_HOME") or home / ".local" / "share") / "recalld"
        cache = Path(env.get("XDG_CACHE_HOME") or home / ".cache") / "recalld"
        run = home / ".cache" / "recalld" / "run"
        dirs = {"data_dir": str(data), "cache_dir": str(cache), "runtime_dir": str(run)}
        config = Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "recalld" / "config.toml"
    socket = env.get("RECALLD_DAEMON__SOCKET", "")
    first = (
        Path(socket).expanduser()
        if socket
        else Path(dirs["runtime_dir"]).expanduser() / "recalld.sock"
    )
    places = [first, home / ".cache" / "recalld" / "run" / "recalld.sock"]
    if env.get("XDG_RUNTIME_DIR"):
        places.append(Path(env["XDG_RUNTIME_DIR"]) / "recalld" / "recalld.sock")
    places.append(Path("/run/user") / str(os.getuid()) / "recalld" / "recalld.sock")
    if env.get("XDG_CACHE_HOME"):
        places.append(Path(env["XDG_CACHE_HOME"]) / "recalld" / "run" / "recalld.sock")
    return dirs, config, list(dict.fromkeys(places)), first


def test_the_places_are_what_path_arithmetic_made_them() -> None:
    envs: list[dict[str, str]] = [{}]
    for odd in ODD:
        envs += [
            {"HOME": odd},
            {"HOME": "/h", "RECALLD_HOME": odd},
            {"HOME": "/h", "XDG_DATA_HOME": odd, "XDG_CACHE_HOME": odd, "XDG_CONFIG_HOME": odd},
            {"HOME": "/h", "XDG_RUNTIME_DIR": odd, "RECALLD_DAEMON__SOCKET": odd},
            {"HOME": "/h//", "XDG_RUNTIME_DIR": "/h/.cache/recalld/run/", "RECALLD_HOME": odd},
        ]
    for env in envs:
        dirs, config, places, first = _before(env)
        assert default_dirs(env) == dirs, env
        assert default_config_path(env) == config, env
        socket = env.get("RECALLD_DAEMON__SOCKET", "")
        assert socket_file(socket, dirs["runtime_dir"]) == first, env
        assert socket_places(first, False, env) == places, env
        assert socket_places(first, True, env) == [first], env


def test_a_client_keeps_its_places_as_paths_print_them() -> None:
    client = Client("run//d.sock/", fallbacks=["run/d.sock", Path("/x/./y.sock"), "run/d.sock"])
    assert client.socket_path == Path("run/d.sock")
    assert client.fallbacks == [Path("/x/y.sock")]
    client.socket_path = Path("/z.sock")
    assert client.socket_path == Path("/z.sock")

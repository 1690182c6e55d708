"""Where recalld's files are by default and where a client looks for the daemon: functions of
the environment alone, with no settings dataclasses, so `recalld search` with nothing to
resolve finds the daemon without loading every setting (issue 20). `recalld.config` builds
the settings on these same functions.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# `client.timeout_s`'s default: seconds to wait for each message from the daemon.
CLIENT_TIMEOUT_S = 120.0


def default_dirs(env: Mapping[str, str]) -> dict[str, str]:
    """The data, cache and runtime folders when no setting names them."""
    home = Path(env.get("HOME", str(Path.home())))
    if root := env.get("RECALLD_HOME"):
        base = Path(root)
        return {
            "data_dir": str(base / "data"),
            "cache_dir": str(base / "cache"),
            "runtime_dir": str(base / "run"),
        }
    data = Path(env.get("XDG_DATA_HOME") or home / ".local" / "share") / "recalld"
    cache = Path(env.get("XDG_CACHE_HOME") or home / ".cache") / "recalld"
    return {"data_dir": str(data), "cache_dir": str(cache), "runtime_dir": str(runtime(home))}


def runtime(home: Path) -> Path:
    """The socket's folder for a user's home."""
    # The socket's folder comes from the user's home alone, not from XDG_RUNTIME_DIR or
    # XDG_CACHE_HOME: editors start MCP servers with a bare environment (HOME, PATH, USER), and
    # the daemon and every client must agree on the path (issue 17).
    return home / ".cache" / "recalld" / "run"


def default_config_path(env: Mapping[str, str]) -> Path:
    """The config file used when none is given: `$XDG_CONFIG_HOME/recalld/config.toml`."""
    if root := env.get("RECALLD_HOME"):
        return Path(root) / "config.toml"
    home = Path(env.get("HOME", str(Path.home())))
    return Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "recalld" / "config.toml"


def socket_file(socket: str, runtime_dir: str) -> Path:
    """The daemon's socket: `daemon.socket`, or `recalld.sock` in the runtime folder."""
    if socket:
        return Path(socket).expanduser()
    return Path(runtime_dir).expanduser() / "recalld.sock"


def socket_places(first: Path, socket_set: bool, env: Mapping[str, str]) -> list[Path]:
    """Where a client looks for the daemon, in order: the configured socket `first`, then,
    unless `daemon.socket` is set, the places daemons of other environments (or older
    versions) use."""
    if socket_set:
        return [first]
    home = Path(env.get("HOME", str(Path.home())))
    places = [first, runtime(home) / "recalld.sock"]
    if env.get("XDG_RUNTIME_DIR"):
        places.append(Path(env["XDG_RUNTIME_DIR"]) / "recalld" / "recalld.sock")
    places.append(Path("/run/user") / str(os.getuid()) / "recalld" / "recalld.sock")
    if env.get("XDG_CACHE_HOME"):
        places.append(Path(env["XDG_CACHE_HOME"]) / "recalld" / "run" / "recalld.sock")
    return list(dict.fromkeys(places))


# The only `RECALLD_*` variables `plain_socket_places` takes: neither can hold a bad value.
PLAIN_ENV = frozenset({"RECALLD_HOME", "RECALLD_DAEMON__SOCKET"})


def plain_socket_places(env: Mapping[str, str]) -> list[Path] | None:
    """`config.socket_candidates` for a client with nothing to resolve: no config file and no
    `RECALLD_*` variable but those in `PLAIN_ENV` (and no `--config` or `--set`, which the
    caller checks). Then every setting but the socket is at its default and loading them
    cannot fail. None otherwise: load the settings."""
    if any(k.startswith("RECALLD_") and k not in PLAIN_ENV for k in env):
        return None
    if default_config_path(env).exists():
        return None
    first = socket_file(env.get("RECALLD_DAEMON__SOCKET", ""), default_dirs(env)["runtime_dir"])
    return socket_places(first, "RECALLD_DAEMON__SOCKET" in env, env)

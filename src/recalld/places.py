"""Where recalld's files are by default and where a client looks for the daemon: functions of
the environment alone, with no settings dataclasses, so `recalld search` with nothing to
resolve finds the daemon without loading every setting (issue 20). `recalld.config` builds
the settings on these same functions.

The places are worked out as path strings written as `pathlib` writes them (`posix_path`):
`pathlib` with its `urllib.parse` and `ipaddress` costs a plain `recalld search` ~4 ms of
start-up. The functions `recalld.config` uses return `Path`s of them.
"""

from __future__ import annotations

import errno
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

# `client.timeout_s`'s default: seconds to wait for each message from the daemon.
CLIENT_TIMEOUT_S = 120.0


def posix_path(text: str) -> str:
    """`str(pathlib.PurePosixPath(text))`: no empty or `.` parts, no trailing slash, and a
    leading `//` (exactly two) kept, as POSIX allows; `..` stays."""
    root = "//" if text[:2] == "//" and text[2:3] != "/" else "/" if text[:1] == "/" else ""
    parts = [part for part in text.split("/") if part and part != "."]
    return root + "/".join(parts) if root or parts else "."


def _join(first: str, *rest: str) -> str:
    """`str(Path(first, *rest))`."""
    return posix_path(os.path.join(first, *rest))


def _expanduser(text: str) -> str:
    """`str(Path(text).expanduser())`.

    Raises:
        RuntimeError: The home folder cannot be found (as `Path.expanduser` raises).
    """
    path = posix_path(text)
    if path[:1] != "~":
        return path
    first, _, rest = path.partition("/")
    home = os.path.expanduser(first)
    if home[:1] == "~":
        raise RuntimeError("Could not determine home directory.")
    return _join(home, rest) if rest else posix_path(home)


def _home(env: Mapping[str, str]) -> str:
    """`Path(env.get("HOME", str(Path.home())))`."""
    return posix_path(env["HOME"]) if "HOME" in env else _expanduser("~")


def default_dirs(env: Mapping[str, str]) -> dict[str, str]:
    """The data, cache and runtime folders when no setting names them."""
    home = _home(env)
    if root := env.get("RECALLD_HOME"):
        return {
            "data_dir": _join(root, "data"),
            "cache_dir": _join(root, "cache"),
            "runtime_dir": _join(root, "run"),
        }
    data = _join(env.get("XDG_DATA_HOME") or _join(home, ".local", "share"), "recalld")
    cache = _join(env.get("XDG_CACHE_HOME") or _join(home, ".cache"), "recalld")
    return {"data_dir": data, "cache_dir": cache, "runtime_dir": _runtime(home)}


def _runtime(home: str) -> str:
    """The socket's folder for a user's home."""
    # The socket's folder comes from the user's home alone, not from XDG_RUNTIME_DIR or
    # XDG_CACHE_HOME: editors start MCP servers with a bare environment (HOME, PATH, USER), and
    # the daemon and every client must agree on the path (issue 17).
    return _join(home, ".cache", "recalld", "run")


def _exists(path: str) -> bool:
    """`Path(path).exists()`: False when nothing is there; another error (a folder one may not
    enter) is raised."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
            raise
        return False
    except ValueError:  # a NUL in the path
        return False
    return True


def _config_path(env: Mapping[str, str]) -> str:
    if root := env.get("RECALLD_HOME"):
        return _join(root, "config.toml")
    home = _home(env)
    config = env.get("XDG_CONFIG_HOME") or _join(home, ".config")
    return _join(config, "recalld", "config.toml")


def default_config_path(env: Mapping[str, str]) -> Path:
    """The config file used when none is given: `$XDG_CONFIG_HOME/recalld/config.toml`."""
    from pathlib import Path

    return Path(_config_path(env))


def _socket_file(socket: str, runtime_dir: str) -> str:
    if socket:
        return _expanduser(socket)
    return _join(_expanduser(runtime_dir), "recalld.sock")


def socket_file(socket: str, runtime_dir: str) -> Path:
    """The daemon's socket: `daemon.socket`, or `recalld.sock` in the runtime folder."""
    from pathlib import Path

    return Path(_socket_file(socket, runtime_dir))


def _socket_places(first: str, socket_set: bool, env: Mapping[str, str]) -> list[str]:
    first = posix_path(first)
    if socket_set:
        return [first]
    places = [first, _join(_runtime(_home(env)), "recalld.sock")]
    if env.get("XDG_RUNTIME_DIR"):
        places.append(_join(env["XDG_RUNTIME_DIR"], "recalld", "recalld.sock"))
    places.append(_join("/run/user", str(os.getuid()), "recalld", "recalld.sock"))
    if env.get("XDG_CACHE_HOME"):
        places.append(_join(env["XDG_CACHE_HOME"], "recalld", "run", "recalld.sock"))
    return list(dict.fromkeys(places))


def socket_places(first: Path, socket_set: bool, env: Mapping[str, str]) -> list[Path]:
    """Where a client looks for the daemon, in order: the configured socket `first`, then,
    unless `daemon.socket` is set, the places daemons of other environments (or older
    versions) use."""
    from pathlib import Path

    return [Path(place) for place in _socket_places(os.fspath(first), socket_set, env)]


# The only `RECALLD_*` variables `plain_socket_places` takes: neither can hold a bad value.
PLAIN_ENV = frozenset({"RECALLD_HOME", "RECALLD_DAEMON__SOCKET"})


def plain_socket_places(env: Mapping[str, str]) -> list[str] | None:
    """`config.socket_candidates` (as strings) for a client with nothing to resolve: no config
    file and no `RECALLD_*` variable but those in `PLAIN_ENV` (and no `--config` or `--set`,
    which the caller checks). Then every setting but the socket is at its default and loading
    them cannot fail. None otherwise: load the settings."""
    if any(k.startswith("RECALLD_") and k not in PLAIN_ENV for k in env):
        return None
    if _exists(_config_path(env)):
        return None
    first = _socket_file(env.get("RECALLD_DAEMON__SOCKET", ""), default_dirs(env)["runtime_dir"])
    return _socket_places(first, "RECALLD_DAEMON__SOCKET" in env, env)

"""Where each coding agent keeps its hook and MCP configuration, and how recalld merges into it.

The formats come from each host's own documentation (issue 21: looked up, not guessed):

- Claude Code: hooks in `settings.json` (`~/.claude/settings.json`, `<project>/.claude/
  settings.json`), https://code.claude.com/docs/en/hooks; MCP servers under `mcpServers` in
  `~/.claude.json` (user scope) or `<project>/.mcp.json` (project scope),
  https://code.claude.com/docs/en/mcp. Hook timeouts are seconds.
- Gemini CLI: hooks and `mcpServers` in `settings.json` (`~/.gemini/settings.json`,
  `<project>/.gemini/settings.json`), https://geminicli.com/docs/hooks/reference and
  https://geminicli.com/docs/tools/mcp-server/. Hook timeouts are milliseconds; the prompt
  event is `BeforeAgent`, the end of a turn `AfterAgent`.
- Cursor: MCP servers under `mcpServers` in `~/.cursor/mcp.json` or `<project>/.cursor/
  mcp.json`, https://cursor.com/docs/mcp; no hooks (see `HOSTS`).
- Codex CLI: hooks in `hooks.json` next to the config layer (`$CODEX_HOME` or `~/.codex`, or
  `<project>/.codex`), https://developers.openai.com/codex/hooks; MCP servers as
  `[mcp_servers.<name>]` tables in `config.toml` beside it, https://developers.openai.com/codex/mcp.
  Hook timeouts are seconds.

Every edit is a merge: other keys, hooks and servers are kept, and a file that does not parse
is refused, never rewritten. Before the first change a copy is kept beside the file
(`<name>.recalld-backup`); uninstalling restores it byte for byte when the file is exactly what
the install wrote, and otherwise removes only recalld's entries.
"""

from __future__ import annotations

import copy
import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recalld.errors import ConfigError

BACKUP_SUFFIX = ".recalld-backup"
SERVER_NAME = "recalld"
# Hook entries of ours are found by this part of their command (see `hook_command`).
HOOK_MARK = " context --host "


@dataclass(frozen=True)
class Host:
    """A coding agent recalld can wire itself into.

    Attributes:
        name: The name used on the command line.
        title: The product's name.
        events: The host's hook events for session start, each prompt and the end of a turn
            (none: recalld installs only its MCP server there).
        timeout: The hook timeout, in the host's unit.
    """

    name: str
    title: str
    events: tuple[str, ...]
    timeout: int


HOSTS: dict[str, Host] = {
    "claude": Host("claude", "Claude Code", ("SessionStart", "UserPromptSubmit", "Stop"), 10),
    "gemini": Host("gemini", "Gemini CLI", ("SessionStart", "BeforeAgent", "AfterAgent"), 10_000),
    "codex": Host("codex", "Codex CLI", ("SessionStart", "UserPromptSubmit", "Stop"), 10),
    # MCP only: Cursor's prompt hook cannot add context, and the output its session-start
    # hook reads is not settled in its documentation (issue 21: formats looked up, not
    # guessed).
    "cursor": Host("cursor", "Cursor", (), 0),
}


@dataclass(frozen=True)
class Change:
    """One file an install or uninstall writes: its bytes before and after."""

    path: Path
    before: bytes | None
    after: bytes | None

    @property
    def changed(self) -> bool:
        """True when the file's bytes (or its existence) change."""
        return self.before != self.after


def config_files(
    host: str, scope: str, home: Path, project: Path, codex_home: Path | None
) -> dict[str, Path]:
    """The files `host` reads its hooks (`hooks`) and MCP servers (`mcp`) from, per scope."""
    if host == "claude":
        if scope == "user":
            return {"hooks": home / ".claude" / "settings.json", "mcp": home / ".claude.json"}
        return {"hooks": project / ".claude" / "settings.json", "mcp": project / ".mcp.json"}
    if host == "gemini":
        base = (home if scope == "user" else project) / ".gemini" / "settings.json"
        return {"hooks": base, "mcp": base}
    if host == "codex":
        base = (codex_home or home / ".codex") if scope == "user" else project / ".codex"
        return {"hooks": base / "hooks.json", "mcp": base / "config.toml"}
    if host == "cursor":
        return {"mcp": (home if scope == "user" else project) / ".cursor" / "mcp.json"}
    raise ConfigError(f"unknown agent host {host!r}; known: {', '.join(HOSTS)}")


def is_ours(command: object) -> bool:
    """True for a hook command recalld wrote."""
    return isinstance(command, str) and "recalld" in command and HOOK_MARK in command


# -- JSON files (hooks of every host, MCP of Claude Code and Gemini CLI) -----------------------


def read_json(path: Path, data: bytes | None) -> dict[str, Any]:
    """A JSON config file's object ({} when it does not exist).

    Raises:
        ConfigError: It is not a JSON object; nothing is written then.
    """
    if data is None or not data.strip():
        return {}
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(
            f"{path} is not valid JSON ({exc}); fix it first, recalld leaves it as it is"
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(f"{path} does not hold a JSON object; recalld leaves it as it is")
    return value


def render_json(value: Mapping[str, Any]) -> bytes:
    """A JSON config file's bytes, indented as the hosts write them."""
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _hook_entry(host: Host, command: str) -> dict[str, Any]:
    hook: dict[str, Any] = {"type": "command", "command": command, "timeout": host.timeout}
    if host.name == "gemini":
        hook["name"] = SERVER_NAME  # Gemini names hooks in its logs and `/hooks` panel
    return {"hooks": [hook]}


def _has_ours(groups: object) -> bool:
    return isinstance(groups, list) and any(
        isinstance(g, dict)
        and any(isinstance(h, dict) and is_ours(h.get("command")) for h in g.get("hooks") or [])
        for g in groups
    )


def add_hooks(config: dict[str, Any], host: Host, command: str) -> dict[str, Any]:
    """`config` with recalld's hook on each of `host`'s three events (others kept)."""
    out = copy.deepcopy(config)
    hooks = out.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise ConfigError("the config's 'hooks' is not an object; recalld leaves it as it is")
    for event in host.events:
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise ConfigError(f"the config's hooks.{event} is not a list; recalld leaves it")
        if _commands(groups) & {command}:
            continue  # already there: a reinstall changes nothing
        groups[:] = _without_ours(groups)
        groups.append(_hook_entry(host, command))
    return out


def _commands(groups: list[Any]) -> set[str]:
    return {
        h["command"]
        for g in groups
        if isinstance(g, dict)
        for h in g.get("hooks") or []
        if isinstance(h, dict) and isinstance(h.get("command"), str)
    }


def _without_ours(groups: list[Any]) -> list[Any]:
    kept = []
    for group in groups:
        if isinstance(group, dict) and isinstance(group.get("hooks"), list):
            inner = [
                h for h in group["hooks"] if not (isinstance(h, dict) and is_ours(h.get("command")))
            ]
            if not inner and group["hooks"]:
                continue  # a group that held only recalld's hook goes with it
            group = {**group, "hooks": inner}
        kept.append(group)
    return kept


def remove_hooks(config: dict[str, Any]) -> dict[str, Any]:
    """`config` without recalld's hooks; events and `hooks` left empty by that are dropped."""
    out = copy.deepcopy(config)
    hooks = out.get("hooks")
    if not isinstance(hooks, dict):
        return out
    for event in list(hooks):
        groups = hooks[event]
        if not _has_ours(groups):
            continue
        kept = _without_ours(groups)
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    if not hooks:
        del out["hooks"]
    return out


def has_hooks(config: Mapping[str, Any]) -> bool:
    """True when any event carries recalld's hook."""
    hooks = config.get("hooks")
    return isinstance(hooks, dict) and any(_has_ours(g) for g in hooks.values())


def add_server(config: dict[str, Any], command: list[str]) -> dict[str, Any]:
    """`config` with the `recalld` MCP server under `mcpServers` (others kept)."""
    out = copy.deepcopy(config)
    servers = out.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise ConfigError("the config's 'mcpServers' is not an object; recalld leaves it")
    servers[SERVER_NAME] = {"command": command[0], "args": command[1:]}
    return out


def remove_server(config: dict[str, Any]) -> dict[str, Any]:
    """`config` without the `recalld` MCP server."""
    out = copy.deepcopy(config)
    servers = out.get("mcpServers")
    if isinstance(servers, dict) and SERVER_NAME in servers:
        del servers[SERVER_NAME]
        if not servers:
            del out["mcpServers"]
    return out


def has_server(config: Mapping[str, Any]) -> bool:
    """True when the `recalld` MCP server is configured."""
    servers = config.get("mcpServers")
    return isinstance(servers, dict) and SERVER_NAME in servers


# -- TOML (Codex CLI's config.toml) --------------------------------------------------------------
# No TOML writer keeps a user's comments and layout, so recalld appends one marked table and
# removes exactly that text again.

TOML_MARK = "# recalld: added by `recalld agent install codex` (`recalld agent uninstall codex`)\n"


def toml_block(command: list[str]) -> str:
    """The `[mcp_servers.recalld]` table recalld appends to a config.toml."""
    # A JSON string is a valid TOML basic string for the paths and words written here.
    args = ", ".join(json.dumps(a) for a in command[1:])
    table = f"[mcp_servers.{SERVER_NAME}]\ncommand = {json.dumps(command[0])}\nargs = [{args}]\n"
    return f"\n{TOML_MARK}{table}"


def read_toml(path: Path, data: bytes | None) -> dict[str, Any]:
    """A config.toml's tables ({} when it does not exist).

    Raises:
        ConfigError: It does not parse; nothing is written then.
    """
    if data is None:
        return {}
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path} is not valid TOML ({exc}); recalld leaves it as it is") from None


def toml_has_server(config: Mapping[str, Any]) -> bool:
    """True when config.toml defines `[mcp_servers.recalld]`."""
    servers = config.get("mcp_servers")
    return isinstance(servers, dict) and SERVER_NAME in servers

"""`recalld agent install|uninstall|list` in a temporary HOME for each host: the config parses
and carries the hooks and the MCP server, a reinstall changes nothing, and uninstall gives
back the original bytes."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from recalld.cli import main
from recalld.cli.agent import daemon_socket, hook_command, recalld_command
from recalld.cli.agent_hosts import HOSTS


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "agent-home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    return home


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(args)
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out + err


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


# What a user already has, in each host's own format: recalld must keep all of it.
EXISTING = {
    "claude": {
        ".claude/settings.json": {
            "model": "opus",
            "hooks": {
                "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
                "PreToolUse": [
                    {"matcher": "Bash", "hooks": [{"type": "command", "command": "audit"}]}
                ],
            },
        },
        ".claude.json": {"numStartups": 12, "mcpServers": {"github": {"command": "gh-mcp"}}},
    },
    "gemini": {
        ".gemini/settings.json": {
            "theme": "Dracula",
            "mcpServers": {"maps": {"httpUrl": "https://example.invalid/mcp"}},
            "hooks": {"BeforeTool": [{"matcher": "run_shell_command", "hooks": []}]},
        },
    },
    "cursor": {
        ".cursor/mcp.json": {"mcpServers": {"docs": {"command": "docs-mcp", "args": ["--x"]}}},
    },
    "codex": {
        ".codex/hooks.json": {
            "hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "hello"}]}]}
        },
    },
}
CODEX_TOML = b'model = "o4"\n\n[mcp_servers.docs]\ncommand = "docs-mcp"  # keep this comment\n'


def seed(home: Path, host: str) -> None:
    for rel, value in EXISTING[host].items():
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value, indent=4) + "\n")  # not the indent recalld writes
    if host == "codex":
        (home / ".codex" / "config.toml").write_bytes(CODEX_TOML)


def check_installed(home: Path, host: str) -> None:
    command = hook_command(host, recalld_command(), daemon_socket())
    program = recalld_command()
    spec = HOSTS[host]
    if host == "claude":
        hooks = json.loads((home / ".claude/settings.json").read_text())
        servers = json.loads((home / ".claude.json").read_text())["mcpServers"]
        assert servers["github"] == {"command": "gh-mcp"}
        assert json.loads((home / ".claude.json").read_text())["numStartups"] == 12
    elif host == "gemini":
        hooks = json.loads((home / ".gemini/settings.json").read_text())
        servers = hooks["mcpServers"]
        assert hooks["theme"] == "Dracula" and "maps" in servers
    elif host == "cursor":
        hooks = {"hooks": {}}  # MCP only
        servers = json.loads((home / ".cursor/mcp.json").read_text())["mcpServers"]
        assert servers["docs"] == {"command": "docs-mcp", "args": ["--x"]}
    else:
        hooks = json.loads((home / ".codex/hooks.json").read_text())
        config = tomllib.loads((home / ".codex/config.toml").read_text())
        servers = config["mcp_servers"]
        assert servers["docs"] == {"command": "docs-mcp"} and config["model"] == "o4"
    assert servers["recalld"] == {"command": program[0], "args": [*program[1:], "mcp"]}
    for event in spec.events:
        found = [h for g in hooks["hooks"][event] for h in g["hooks"]]
        ours = [h for h in found if h["command"] == command]
        assert len(ours) == 1, event
        assert ours[0]["type"] == "command" and ours[0]["timeout"] == spec.timeout
    # The user's own hooks are still there.
    if host == "claude":
        stop = [h["command"] for g in hooks["hooks"]["Stop"] for h in g["hooks"]]
        assert "notify-send done" in stop and hooks["hooks"]["PreToolUse"][0]["matcher"] == "Bash"
    if host == "codex":
        start = [h["command"] for g in hooks["hooks"]["SessionStart"] for h in g["hooks"]]
        assert "hello" in start


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_install_merges_reinstall_is_a_no_op_uninstall_restores_bytes(
    host: str, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(home, host)
    original = snapshot(home)

    code, out = run(["agent", "install", host, "--dry-run"], capsys)
    assert code == 0 and "+" in out and snapshot(home) == original  # printed, nothing written

    code, out = run(["agent", "install", host], capsys)
    assert code == 0, out
    check_installed(home, host)
    installed = {k: v for k, v in snapshot(home).items() if not k.endswith("recalld-backup")}
    backups = {k: v for k, v in snapshot(home).items() if k.endswith(".recalld-backup")}
    assert backups and all(
        original[k.removesuffix(".recalld-backup")] == v for k, v in backups.items()
    )

    code, out = run(["agent", "install", host], capsys)
    assert code == 0 and "nothing to change" in out
    assert {
        k: v for k, v in snapshot(home).items() if not k.endswith("recalld-backup")
    } == installed

    code, out = run(["agent", "list", "--json"], capsys)
    rows = {(r["host"], r["scope"]): r for r in json.loads(out)["agents"]}
    assert rows[(host, "user")]["mcp"]
    assert rows[(host, "user")]["hooks"] == bool(HOSTS[host].events)

    code, out = run(["agent", "uninstall", host], capsys)
    assert code == 0, out
    assert snapshot(home) == original  # byte for byte, backups gone


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_install_into_an_empty_home_and_back(
    host: str, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(["agent", "install", host], capsys)
    assert snapshot(home)
    run(["agent", "uninstall", host], capsys)
    assert snapshot(home) == {}


def test_uninstall_after_the_user_changed_the_file_keeps_their_change(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(home, "claude")
    run(["agent", "install", "claude"], capsys)
    settings = home / ".claude/settings.json"
    data = json.loads(settings.read_text())
    data["theme"] = "dark"
    settings.write_text(json.dumps(data))
    run(["agent", "uninstall", "claude"], capsys)
    after = json.loads(settings.read_text())
    assert after["theme"] == "dark" and after["model"] == "opus"
    assert "recalld" not in settings.read_text()
    assert [h["command"] for g in after["hooks"]["Stop"] for h in g["hooks"]] == [
        "notify-send done"
    ]
    assert "recalld" not in json.dumps(json.loads((home / ".claude.json").read_text()))


def test_a_file_that_does_not_parse_is_left_alone(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = home / ".gemini/settings.json"
    settings.parent.mkdir()
    settings.write_bytes(b'{"theme": "x",,}')
    code, out = run(["agent", "install", "gemini"], capsys)
    assert code == 1 and "not valid JSON" in out
    assert settings.read_bytes() == b'{"theme": "x",,}'


def test_project_scope_writes_the_project_files(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "app"
    project.mkdir()
    code, out = run(
        ["agent", "install", "claude", "--scope", "project", "--project", str(project)], capsys
    )
    assert code == 0, out
    assert "recalld" in json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert "SessionStart" in json.loads((project / ".claude/settings.json").read_text())["hooks"]
    assert snapshot(home) == {}
    run(["agent", "uninstall", "claude", "--scope", "project", "--project", str(project)], capsys)
    assert snapshot(project) == {}


def test_codex_home_is_honoured(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    codex_home = tmp_path / "codex-home"
    monkeypatch.setenv("CODEX_HOME", str(codex_home))
    run(["agent", "install", "codex"], capsys)
    assert (codex_home / "hooks.json").exists() and (codex_home / "config.toml").exists()
    assert not (home / ".codex").exists()

"""`recalld agent install|uninstall|list HOST`: wire a coding agent's hooks and MCP server.

The hooks run `recalld context --host HOST` at session start, at each prompt and at the end
of each turn (see `recalld.hooks`); the MCP server is `recalld mcp`. The file formats and the
merge rules are in `recalld.cli.agent_hosts`.
"""

from __future__ import annotations

import difflib
import os
import shlex
import shutil
import sys
from pathlib import Path

import click

from recalld.cli import agent_hosts as hosts
from recalld.cli.agent_hosts import BACKUP_SUFFIX, HOSTS, Change, Host
from recalld.cli.connection import load
from recalld.cli.output import emit
from recalld.errors import ConfigError


def recalld_command() -> list[str]:
    """How the hosts should start recalld: this installation's own `recalld` script."""
    script = Path(sys.executable).parent / "recalld"
    if script.exists():
        return [os.fspath(script)]
    found = shutil.which("recalld")
    return [found] if found else [sys.executable, "-m", "recalld"]


def hook_command(host: str, program: list[str], socket: Path | None = None) -> str:
    """The shell command a host runs for every hook event. The socket is written in, so the
    hook need not resolve the settings on every prompt (re-run the install after changing
    `daemon.socket`)."""
    command = " ".join(shlex.quote(p) for p in program) + hosts.HOOK_MARK + host
    if socket is not None:
        command += " --socket " + shlex.quote(os.fspath(socket))
    return command


def daemon_socket() -> Path:
    """The socket the daemon listens on with the current settings."""
    return load(None, ()).settings.socket_path


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _backup_path(path: Path) -> Path:
    return path.with_name(path.name + BACKUP_SUFFIX)


def _install_bytes(
    host: Host, path: Path, roles: set[str], data: bytes | None, program: list[str]
) -> bytes | None:
    """What installing makes of a file holding `data` (None: it does not exist)."""
    if path.suffix == ".toml":
        if hosts.toml_has_server(hosts.read_toml(path, data)):
            return data  # configured already (by us or by hand): left alone
        block = hosts.toml_block([*program, "mcp"])
        after = (data + block.encode()) if data else block.lstrip("\n").encode()
        hosts.read_toml(path, after)  # never write a file the host cannot read
        return after
    config = hosts.read_json(path, data)
    new = config
    if "hooks" in roles:
        new = hosts.add_hooks(new, host, hook_command(host.name, program, daemon_socket()))
    if "mcp" in roles:
        new = hosts.add_server(new, [*program, "mcp"])
    return data if new == config else hosts.render_json(new)


def _uninstall_bytes(path: Path, roles: set[str], data: bytes) -> bytes:
    """`data` without recalld's entries (the surgical way)."""
    if path.suffix == ".toml":
        text = data.decode("utf-8")
        for block in _toml_blocks(text):
            index = text.rfind(block)
            if index >= 0:
                return (text[:index] + text[index + len(block) :]).encode()
        return data
    config = hosts.read_json(path, data)
    new = config
    if "hooks" in roles:
        new = hosts.remove_hooks(new)
    if "mcp" in roles:
        new = hosts.remove_server(new)
    return data if new == config else hosts.render_json(new)


def _toml_blocks(text: str) -> list[str]:
    """The exact blocks recalld may have appended, found by their marker line."""
    start = text.rfind(hosts.TOML_MARK)
    if start < 0:
        return []
    # The block runs from the marker to the end of its `args` line.
    end = text.find("\n", text.find("\nargs = ", start) + 1)
    block = text[start : end + 1 if end >= 0 else len(text)]
    return ["\n" + block, block]


def _files(host: str, scope: str, project: Path) -> dict[Path, set[str]]:
    codex_home = os.environ.get("CODEX_HOME")
    files = hosts.config_files(
        host, scope, Path.home(), project, Path(codex_home) if codex_home else None
    )
    by_path: dict[Path, set[str]] = {}
    for role, path in files.items():
        by_path.setdefault(path, set()).add(role)
    return by_path


def plan_install(host: Host, scope: str, project: Path, program: list[str]) -> list[Change]:
    """The files an install changes, with their bytes before and after."""
    return [
        Change(path, before, _install_bytes(host, path, roles, before, program))
        for path, roles in _files(host.name, scope, project).items()
        for before in [_read(path)]
    ]


def plan_uninstall(host: Host, scope: str, project: Path, program: list[str]) -> list[Change]:
    """The files an uninstall changes. A file that is exactly what the install made of its
    backup gets the backup's bytes back (or is removed when there was none); otherwise only
    recalld's entries are taken out."""
    changes = []
    for path, roles in _files(host.name, scope, project).items():
        before = _read(path)
        if before is None:
            continue
        backup = _read(_backup_path(path))
        if before == _install_bytes(host, path, roles, backup, program) and before != backup:
            changes.append(Change(path, before, backup))
        else:
            changes.append(Change(path, before, _uninstall_bytes(path, roles, before)))
    return changes


def _write(change: Change, *, installing: bool) -> None:
    path, backup = change.path, _backup_path(change.path)
    if installing:
        if change.before is None:
            backup.unlink(missing_ok=True)  # a stale copy would restore a file that was not there
        elif not _mentions_recalld(change.before):
            backup.write_bytes(change.before)  # the state before recalld: what uninstall restores
    if change.after is None:
        path.unlink(missing_ok=True)
        backup.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".recalld-tmp")
    temporary.write_bytes(change.after)
    if change.before is not None:
        shutil.copymode(path, temporary)
    os.replace(temporary, path)  # atomic: a host reading the file never sees half of it
    if not installing and change.after == _read(backup):
        backup.unlink()


def _mentions_recalld(data: bytes) -> bool:
    return (
        hosts.HOOK_MARK.encode() in data
        or hosts.TOML_MARK.encode() in data
        or (b'"' + hosts.SERVER_NAME.encode() + b'"' in data)
    )


def _diff(change: Change) -> str:
    def lines(data: bytes | None) -> list[str]:
        return [] if data is None else data.decode("utf-8", "replace").splitlines(keepends=True)

    name = os.fspath(change.path)
    return "".join(
        difflib.unified_diff(
            lines(change.before),
            lines(change.after),
            fromfile=name if change.before is not None else "/dev/null",
            tofile=name if change.after is not None else "/dev/null",
        )
    )


def _report(change: Change) -> dict[str, object]:
    return {
        "path": os.fspath(change.path),
        "changed": change.changed,
        "exists": change.after is not None,
        "backup": os.fspath(_backup_path(change.path))
        if _backup_path(change.path).exists()
        else None,
    }


host_argument = click.argument("host", type=click.Choice(sorted(HOSTS)))
scope_option = click.option(
    "--scope",
    type=click.Choice(["user", "project"]),
    default="user",
    show_default=True,
    help="The user's own config, or the project's (in --project).",
)
project_option = click.option(
    "--project",
    "project",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    help="The project folder for --scope project (default: here).",
)
dry_run_option = click.option("--dry-run", is_flag=True, help="Print the change; write nothing.")
json_flag = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


@click.group()
def agent() -> None:
    """Wire recalld into a coding agent: hooks that bring memories in and capture sessions,
    and the MCP server (Claude Code, Gemini CLI, Codex CLI; Cursor: the MCP server only)."""


def _run(plan: list[Change], dry_run: bool, as_json: bool, installing: bool, title: str) -> None:
    if not dry_run:
        for change in plan:
            if change.changed:
                _write(change, installing=installing)
    result = {"dry_run": dry_run, "files": [_report(c) for c in plan]}

    def render(out: object) -> None:
        changed = [c for c in plan if c.changed]
        if dry_run:
            for change in changed:
                click.echo(_diff(change), nl=False)
        verb = "would change" if dry_run else "changed"
        if not changed:
            click.echo(f"{title}: nothing to change.")
        for change in changed:
            click.echo(f"{title}: {verb} {change.path}")
        if installing and not dry_run:
            click.echo(
                f"Restart {title} to load it; the daemon must be running "
                "(`recalld serve`, or `recalld service install` to start it with your session)."
            )

    emit(result, as_json, render)


@agent.command("install")
@host_argument
@scope_option
@project_option
@dry_run_option
@json_flag
def agent_install(host: str, scope: str, project: Path, dry_run: bool, as_json: bool) -> None:
    """Add recalld's hooks and MCP server to HOST's config (merged; a backup is kept)."""
    spec = HOSTS[host]
    plan = plan_install(spec, scope, project.resolve(), recalld_command())
    _run(plan, dry_run, as_json, True, spec.title)


@agent.command("uninstall")
@host_argument
@scope_option
@project_option
@dry_run_option
@json_flag
def agent_uninstall(host: str, scope: str, project: Path, dry_run: bool, as_json: bool) -> None:
    """Remove recalld's hooks and MCP server from HOST's config (the original bytes come
    back when nothing else changed)."""
    spec = HOSTS[host]
    plan = plan_uninstall(spec, scope, project.resolve(), recalld_command())
    _run(plan, dry_run, as_json, False, spec.title)


@agent.command("list")
@click.option(
    "--project",
    "project",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    help="The project folder whose project-scope files are read.",
)
@json_flag
def agent_list(project: Path, as_json: bool) -> None:
    """Which hosts have recalld's hooks and MCP server, per scope."""
    rows = []
    for name, spec in sorted(HOSTS.items()):
        for scope in ("user", "project"):
            hooks_found = server_found = False
            paths = []
            for path, roles in _files(name, scope, project.resolve()).items():
                data = _read(path)
                paths.append(os.fspath(path))
                try:
                    if path.suffix == ".toml":
                        server_found |= hosts.toml_has_server(hosts.read_toml(path, data))
                        continue
                    config = hosts.read_json(path, data)
                except ConfigError:
                    continue
                hooks_found |= "hooks" in roles and hosts.has_hooks(config)
                server_found |= "mcp" in roles and hosts.has_server(config)
            rows.append(
                {
                    "host": name,
                    "title": spec.title,
                    "scope": scope,
                    "hooks": hooks_found,
                    "mcp": server_found,
                    "files": paths,
                }
            )

    def render(out: object) -> None:
        for row in rows:
            complete = row["mcp"] and (row["hooks"] or not HOSTS[str(row["host"])].events)
            mark = "yes" if complete else "partly" if row["hooks"] or row["mcp"] else "no"
            click.echo(f"{row['title']:<12} {row['scope']:<8} {mark:<7} {', '.join(row['files'])}")  # type: ignore[arg-type]

    emit({"agents": rows}, as_json, render)


@click.command("context")
@click.option(
    "--host",
    type=click.Choice(sorted(n for n, h in HOSTS.items() if h.events)),
    help="The agent whose payload this is.",
)
@click.option(
    "--event",
    help="start, prompt or stop (default: from the payload's hook_event_name).",
)
@click.option(
    "--budget",
    type=click.IntRange(0, 100_000),
    default=800,
    show_default=True,
    help="Most tokens to inject (0: inject nothing).",
)
@click.option("--socket", type=click.Path(dir_okay=False), help="The daemon's socket.")
@click.option(
    "--project",
    type=click.Path(file_okay=False),
    help="The project folder (default: the payload's cwd, then its git root).",
)
@click.option("--verbose", is_flag=True, help="Say on stderr why nothing was printed.")
def context(
    host: str | None,
    event: str | None,
    budget: int,
    socket: str | None,
    project: str | None,
    verbose: bool,
) -> None:
    """Agent hook: read the host's hook payload (JSON) on stdin and print the memories to
    inject (session start, prompt) or capture the transcript (stop). Always exits 0, printing
    nothing when the daemon is down or the payload is malformed. `recalld agent install`
    wires it."""
    # Imported here: the hook is normally reached without click (see recalld.launcher).
    from recalld.hooks.context import main as hook

    args = [f"--budget={budget}"]
    for name, value in (("host", host), ("event", event), ("socket", socket), ("project", project)):
        if value:
            args.append(f"--{name}={value}")
    if verbose:
        args.append("--verbose=1")
    hook(args)

"""Running the daemon: `serve` in the foreground, and `service install|uninstall` for systemd
(user unit) on Linux or launchd (agent plist) on macOS."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from html import escape
from pathlib import Path
from string import Template

import click

from recalld.cli.common import settings_options
from recalld.cli.connection import parse_sets
from recalld.cli.output import print_json
from recalld.cli.templates import LAUNCHD_PLIST, SYSTEMD_UNIT

LABEL = "dev.recalld"
UNIT_NAME = "recalld.service"
CARRIED_XDG = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")
URL_PASSWORD = re.compile(r"://[^/@\s:]*:[^/@\s]+@")
# What systemctl says when there is no user manager to talk to.
NO_BUS = re.compile(
    r"connect to bus|DBUS_SESSION_BUS_ADDRESS|XDG_RUNTIME_DIR|No medium found", re.IGNORECASE
)


@click.command()
@settings_options
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON object per log line.",
)
@click.option(
    "--shutdown-timeout",
    type=click.FloatRange(0),
    default=10.0,
    show_default=True,
    help="Seconds to finish requests and drain the ingest queue on SIGTERM; what is "
    "left is picked up at the next start.",
)
@click.pass_context
def serve(
    ctx: click.Context,
    config_file: Path | None,
    sets: tuple[str, ...],
    log_level: str,
    log_format: str,
    shutdown_timeout: float,
) -> None:
    """Run the daemon in the foreground (logs to stderr; stop with Ctrl-C or SIGTERM).

    SIGHUP reloads the config. Exits 3 when it cannot start (bad config, already running,
    store embedded with another model)."""
    # Imported here: the daemon pulls in the store, numpy and the model.
    from recalld.daemon.lifecycle import default_config, run

    code = run(
        default_config(
            config_file=config_file,
            overrides=parse_sets(sets),
            log_level=log_level,
            log_format=log_format,
            configure_logging=True,
            shutdown_timeout=shutdown_timeout,
        )
    )
    ctx.exit(code)


@dataclass(frozen=True)
class ServiceFile:
    """A rendered service file, where it goes, and the commands that enable it."""

    path: Path
    text: str
    enable: list[list[str]]
    disable: list[list[str]]
    # What enabling creates beside the file (systemd's `.wants` link), removed by uninstall
    # even when the service manager cannot be reached.
    links: tuple[Path, ...] = ()


def _command(config_file: Path | None, sets: tuple[str, ...]) -> list[str]:
    command = [sys.executable, "-m", "recalld", "serve"]
    if config_file is not None:
        command += ["--config", os.fspath(config_file.expanduser().resolve())]
    for item in sets:
        command += ["--set", item]
    return command


def carried_environment(env: Mapping[str, str]) -> dict[str, str]:
    """What the service must see of the installer's environment: every `RECALLD_*` variable
    and the XDG base directories, which decide the store, config and socket (issue 17).

    Raises:
        click.ClickException: A value holds a password (a database URL with one); it would be
            written into the service file.
    """
    carried = {k: v for k, v in sorted(env.items()) if k.startswith("RECALLD_") and v}
    carried.update({k: env[k] for k in CARRIED_XDG if env.get(k)})
    for name, value in carried.items():
        if URL_PASSWORD.search(value):
            raise click.ClickException(
                f"{name} holds a password, which would be written into the service file; put "
                "it in ~/.pgpass (or PGPASSWORD) instead, drop it from the URL and install again"
            )
    return carried


def _systemd_environment(environment: Mapping[str, str]) -> str:
    # systemd's quoting: double quotes with C escapes; `%` starts a specifier, so it is doubled.
    lines = []
    for name, value in environment.items():
        quoted = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
        lines.append(f'Environment="{name}={quoted}"\n')
    return "".join(lines)


def _launchd_environment(environment: Mapping[str, str]) -> str:
    return "\n".join(
        f"    <key>{escape(name)}</key>\n    <string>{escape(value)}</string>"
        for name, value in environment.items()
    )


def render_service(
    platform: str,
    home: Path,
    config_file: Path | None = None,
    sets: tuple[str, ...] = (),
    environment: Mapping[str, str] | None = None,
) -> ServiceFile:
    """The service file for `platform` (`linux` or `macos`) in `home`, carrying `environment`
    (see `carried_environment`)."""
    command = _command(config_file, sets)
    environment = environment or {}
    if platform == "linux":
        path = home / ".config" / "systemd" / "user" / UNIT_NAME
        text = Template(SYSTEMD_UNIT).substitute(
            arguments=shlex.join(command), environment=_systemd_environment(environment)
        )
        return ServiceFile(
            path,
            text,
            enable=[
                ["systemctl", "--user", "daemon-reload"],
                ["systemctl", "--user", "enable", "--now", UNIT_NAME],
            ],
            disable=[
                ["systemctl", "--user", "disable", "--now", UNIT_NAME],
                ["systemctl", "--user", "daemon-reload"],
            ],
            links=(path.parent / "default.target.wants" / UNIT_NAME,),
        )
    path = home / "Library" / "LaunchAgents" / f"{LABEL}.plist"
    arguments = "\n".join(f"    <string>{escape(a)}</string>" for a in command)
    log = home / "Library" / "Logs" / "recalld.log"
    text = Template(LAUNCHD_PLIST).substitute(
        label=LABEL,
        arguments=arguments,
        log=escape(os.fspath(log)),
        environment=_launchd_environment(environment),
    )
    return ServiceFile(
        path,
        text,
        enable=[["launchctl", "load", "-w", os.fspath(path)]],
        disable=[["launchctl", "unload", "-w", os.fspath(path)]],
    )


def _platform(value: str | None) -> str:
    if value:
        return value
    if sys.platform.startswith("linux"):
        return "linux"
    if sys.platform == "darwin":
        return "macos"
    raise click.UsageError(
        f"no service manager support on {sys.platform}; run "
        "`recalld serve` from your own supervisor"
    )


def _run(commands: list[list[str]]) -> None:
    """Run the service manager's commands.

    Raises:
        click.ClickException: One is missing or fails; a missing user bus is explained.
    """
    for command in commands:
        if shutil.which(command[0]) is None:
            raise click.ClickException(
                f"{command[0]} not found; run by hand: {shlex.join(command)}"
            )
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            detail = done.stderr.strip() or str(done.returncode)
            if command[:2] == ["systemctl", "--user"] and NO_BUS.search(detail):
                raise click.ClickException(
                    f"{shlex.join(command)} failed: {detail}. There is no systemd user "
                    "session here (typical under su, sudo, cron or some ssh and container "
                    "setups): log in as this user directly, or have root run `loginctl "
                    "enable-linger $USER` and use `machinectl shell $USER@`, then run the "
                    "command again"
                )
            raise click.ClickException(f"{shlex.join(command)} failed: {detail}")


@click.group()
def service() -> None:
    """Install recalld as a user service (systemd on Linux, launchd on macOS)."""


_platform_option = click.option(
    "--platform", type=click.Choice(["linux", "macos"]), help="Default: this machine's."
)
_dry_run_option = click.option(
    "--dry-run", is_flag=True, help="Print what would be written and run; change nothing."
)


@service.command("install")
@settings_options
@_platform_option
@_dry_run_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def install(
    config_file: Path | None,
    sets: tuple[str, ...],
    platform: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Write the service file and enable it (starts the daemon now and at login).

    The service gets this shell's RECALLD_* variables (RECALLD_HOME above all) and XDG base
    directories, so it uses the same store, config and socket."""
    environment = carried_environment(os.environ)
    rendered = render_service(_platform(platform), Path.home(), config_file, sets, environment)
    if as_json:
        print_json(
            {
                "path": os.fspath(rendered.path),
                "text": rendered.text,
                "commands": [shlex.join(c) for c in rendered.enable],
                "environment": sorted(environment),
                "dry_run": dry_run,
            }
        )
    elif dry_run:
        click.echo(f"# would write {rendered.path}")
        click.echo(rendered.text, nl=False)
        for command in rendered.enable:
            click.echo(f"# would run: {shlex.join(command)}")
    if dry_run:
        return
    rendered.path.parent.mkdir(parents=True, exist_ok=True)
    # 0600: the file carries the installer's settings (paths, the socket, model endpoints).
    rendered.path.touch(mode=0o600)
    rendered.path.chmod(0o600)
    rendered.path.write_text(rendered.text, "utf-8")
    try:
        _run(rendered.enable)
    except click.ClickException as exc:
        raise click.ClickException(
            f"{exc.message}. {rendered.path} is written; enable it then with "
            f"`{shlex.join(rendered.enable[-1])}`, or remove it with `recalld service uninstall`"
        ) from None
    if not as_json:
        click.echo(f"Installed {rendered.path} and started recalld.")
        if environment:
            click.echo(f"It runs with {', '.join(environment)} as set here.")


@service.command("uninstall")
@_platform_option
@_dry_run_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def uninstall(platform: str | None, dry_run: bool, as_json: bool) -> None:
    """Stop and disable the service and remove its file."""
    rendered = render_service(_platform(platform), Path.home())
    if as_json:
        print_json(
            {
                "path": os.fspath(rendered.path),
                "commands": [shlex.join(c) for c in rendered.disable],
                "dry_run": dry_run,
            }
        )
    elif dry_run:
        for command in rendered.disable:
            click.echo(f"# would run: {shlex.join(command)}")
        click.echo(f"# would remove {rendered.path}")
    if dry_run:
        return
    stopped: click.ClickException | None = None
    if rendered.path.exists():
        try:
            _run(rendered.disable)
        except click.ClickException as exc:
            stopped = exc  # the files go anyway: uninstall removes what install wrote
    for leftover in (rendered.path, *rendered.links):
        if leftover.is_symlink() or leftover.exists():
            leftover.unlink()
    if not as_json:
        click.echo(f"Removed {rendered.path}.")
    if stopped is not None:
        raise click.ClickException(
            f"removed the service files, but could not stop the service: {stopped.message}"
        )

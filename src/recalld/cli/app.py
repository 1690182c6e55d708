"""The click application of the `recalld` command line.

Every command but `serve`, `config show`, `check --offline` and `service` talks to the daemon
over its socket. One wrapper, `main`, turns errors into messages and exit codes:
0 ok, 1 error, 2 usage, 3 daemon not running (or, for `serve`, could not start), 130 Ctrl-C.
"""

from __future__ import annotations

import errno
import importlib
import json
import sys
from collections.abc import Sequence
from typing import IO, Any, NoReturn

import click

from recalld import __version__
from recalld.cli.jobs import EXIT_INTERRUPTED
from recalld.errors import ConfigError, DaemonNotRunning, RecalldError
from recalld.masking import mask

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3

# Each command's module, imported only when the command runs (or `--help` lists them all), so
# `recalld search` does not pay for the imports of `serve`, `export` or `mcp` (issue 20).
COMMANDS = {
    "serve": "service:serve",
    "search": "search:search",
    "remember": "search:remember",
    "get": "search:get",
    "forget": "search:forget",
    "unforget": "browse:unforget",
    "list": "browse:list_",
    "edit": "memories:edit",
    "history": "memories:history",
    "link": "memories:link",
    "ingest": "ingest:ingest",
    "jobs": "jobs:jobs",
    "sources": "ingest:sources",
    "status": "admin:status",
    "stop": "admin:stop",
    "calibrate": "admin:calibrate",
    "errors": "admin:errors",
    "check": "admin:check",
    "config": "admin:config",
    "export": "transfer:export",
    "import": "transfer:import_",
    "mcp": "mcp_command:mcp",
    "service": "service:service",
    "models": "models:models",
    "reindex": "models:reindex",
    "tune": "tune:tune",
    "migrate": "migrate:migrate",
    "agent": "agent:agent",
    "context": "agent:context",
}


class LazyGroup(click.Group):
    """A group whose commands in `COMMANDS` are imported on first use (click's documented
    lazy-loading pattern); commands added with `add_command` work as usual."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in COMMANDS:
            module, _, name = COMMANDS[cmd_name].partition(":")
            command = getattr(importlib.import_module(f"recalld.cli.{module}"), name)
            assert isinstance(command, click.Command)
            self.add_command(command, cmd_name)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="recalld")
def cli() -> None:
    """recalld: local-first long-term memory for AI assistants, editors and agents.

    Start the daemon with `recalld serve`; then search, remember and ingest from here.
    """


def _fail(as_json: bool, code: int, kind: str, message: str) -> NoReturn:
    """Say what went wrong on stderr (and, under `--json`, as JSON on stdout) and exit."""
    click.echo(f"Error: {message}", err=True)
    if as_json:
        error = {"type": kind, "message": message, "exit_code": code}
        click.echo(json.dumps({"error": error}, ensure_ascii=False))
    sys.exit(code)


def main(argv: Sequence[str] | None = None) -> None:
    """The console entry point: run `cli` and map errors to messages and exit codes."""
    args = list(argv) if argv is not None else sys.argv[1:]
    as_json = "--json" in args
    try:
        code = cli.main(args=args, prog_name="recalld", standalone_mode=False)
    except (click.exceptions.Abort, click.ClickException, RecalldError, BrokenPipeError) as exc:
        exit_for(exc, as_json)
    sys.exit(code if isinstance(code, int) else 0)


def exit_for(exc: BaseException, as_json: bool) -> NoReturn:
    """Say what `exc` (raised by a command, or by click) means and exit with its code."""
    if isinstance(exc, click.exceptions.Abort):
        click.echo("Aborted!", err=True)
        # click turns Ctrl-C into Abort; a declined prompt is an Abort of its own.
        sys.exit(EXIT_INTERRUPTED if isinstance(exc.__cause__, KeyboardInterrupt) else EXIT_ERROR)
    if isinstance(exc, click.ClickException):
        if not as_json:
            exc.show()
            sys.exit(exc.exit_code)
        _fail(as_json, exc.exit_code, type(exc).__name__, exc.format_message())
    if isinstance(exc, DaemonNotRunning):
        _fail(as_json, EXIT_UNAVAILABLE, type(exc).__name__, mask(exc.message))
    if isinstance(exc, ConfigError):
        # A bad `--set` is a usage error, like any bad flag (exit 2).
        usage = exc.data.get("source") == "flag"
        _fail(as_json, EXIT_USAGE if usage else EXIT_ERROR, type(exc).__name__, mask(exc.message))
    if isinstance(exc, RecalldError):
        _fail(as_json, EXIT_ERROR, type(exc).__name__, mask(exc.message))
    if isinstance(exc, BrokenPipeError):
        sys.exit(EXIT_ERROR)  # e.g. `recalld search x | head -1`
    raise exc


def exit_outside_click(exc: BaseException, as_json: bool) -> NoReturn:
    """`exit_for` an exception from a command run without click (the launcher's fast
    `recalld search`), after what click's own `main` does with it, so the output and the exit
    code are the same as through click."""
    if isinstance(exc, (EOFError, KeyboardInterrupt)):
        click.echo(file=sys.stderr)
        abort = click.exceptions.Abort()
        abort.__cause__ = exc
        exit_for(abort, as_json)
    if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
        # What click does with a closed pipe: exit 1, and no "Exception ignored" at exit.
        sys.stdout = _PipeClosed(sys.stdout)
        sys.stderr = _PipeClosed(sys.stderr)
        sys.exit(EXIT_ERROR)
    exit_for(exc, as_json)


class _PipeClosed:
    """A stream whose `flush` ignores a closed pipe (click's own wrapper is private)."""

    def __init__(self, wrapped: IO[str]) -> None:
        self.wrapped = wrapped

    def flush(self) -> None:
        try:
            self.wrapped.flush()
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)
